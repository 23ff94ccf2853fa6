"""`juju_results` prints what `juju run` prints: Go's gopkg.in/yaml.v2, as juju 3.6 has it.

The expected texts follow the Go sources named in tests/readme_examples.py (juju/yaml v2,
the fork juju 3.6 builds with: emitterc.go, encode.go, resolve.go, sorter.go); each was
also what that library's Marshal printed for the same map.
"""

from __future__ import annotations

import pytest
import readme_examples
from readme_examples import juju_results

QUEUED = (
    "the job is queued behind 2 others because the cluster has no free GPU of that model"
    " right now, so it waits for one"
)


def test_a_long_message_folds_past_column_80_at_a_space():
    # best_width 80: the first space after column 80 becomes a line break, and the rest
    # goes on 2 columns in from the key (write_plain_scalar)
    assert juju_results({"message": QUEUED}) == (
        "message: the job is queued behind 2 others because the cluster has no free GPU of\n"
        "  that model right now, so it waits for one\n"
    )


def test_a_nested_long_message_folds_at_its_own_indentation():
    assert juju_results({"job": {"status": QUEUED}}) == (
        "job:\n"
        "  status: the job is queued behind 2 others because the cluster has no free GPU of\n"
        "    that model right now, so it waits for one\n"
    )


def test_quoted_strings_fold_too_and_literal_blocks_never():
    # ": " rules plain out: single quotes (write_single_quoted_scalar folds the same way)
    note = "queued: the cluster has no free nvidia.com/gpu in flavor gpu-nvidia-a10g, 1 more"
    assert juju_results({"note": note + " needed for worker 3"}) == (
        "note: 'queued: the cluster has no free nvidia.com/gpu in flavor gpu-nvidia-a10g, 1\n"
        "  more needed for worker 3'\n"
    )
    # a tab is not printable for Go's emitter: double quotes, escaped; a fold before a
    # second space keeps it as "\ " on the next line
    status = "status\tall 4 workers ready, 4 GPUs held on gpu-0 and gpu-1, loss 0.4123"
    assert juju_results({"status": status + "  then 3000 steps to go"}) == (
        'status: "status\\tall 4 workers ready, 4 GPUs held on gpu-0 and gpu-1, loss 0.4123\n'
        '  \\ then 3000 steps to go"\n'
    )
    line = "a line that is much longer than eighty columns and stays on one line in a literal"
    assert juju_results({"output": f"{line}\nsecond line"}) == (
        f"output: |-\n  {line}\n  second line\n"
    )


def test_keys_sort_in_natural_order():
    # sorter.go keyList.Less: digits compare as a number, a shorter prefix first
    results = {"gpu-10": "a", "gpu-2": "b", "gpu-1": "c", "gpus": "d", "gpu": "e"}
    assert juju_results(results) == "gpu: e\ngpu-1: c\ngpu-2: b\ngpu-10: a\ngpus: d\n"
    assert sorted(results) == ["gpu", "gpu-1", "gpu-10", "gpu-2", "gpus"]  # not Python's


@pytest.mark.parametrize(
    "value, printed",
    [
        ("y", '"y"'),  # YAML 1.1 bools (resolve.go resolveMap)
        ("Y", '"Y"'),
        ("n", '"n"'),
        ("N", '"N"'),
        ("yes", '"yes"'),
        ("on", '"on"'),
        ("off", '"off"'),
        ("true", '"true"'),
        ("", '""'),  # null
        ("~", '"~"'),
        ("3", '"3"'),  # ints, Go's ParseInt prefixes included
        ("0o17", '"0o17"'),
        ("08", "08"),  # not octal, not an int
        ("1e+5", '"1e+5"'),  # the fork's float regexp wants the exponent's sign
        ("1e5", "1e5"),
        ("2026-11-24", '"2026-11-24"'),  # a timestamp
        ("1:30", '"1:30"'),  # a base-60 float
        ("<<", "<<"),  # '<' is no resolve hint: plain
        ("2/2", "2/2"),
        ("a: b", "'a: b'"),  # what plain can't hold: single quotes
    ],
)
def test_a_value_that_reads_as_another_type_is_double_quoted(value, printed):
    assert juju_results({"v": value}) == f"v: {printed}\n"


def test_a_key_that_reads_as_a_bool_is_quoted_too():
    assert juju_results({"y": "1", "x": "yes"}) == 'x: "yes"\n"y": "1"\n'


def test_nested_maps_and_dotted_keys():
    results = {
        "count": 3,
        "gpus": {
            "0": {"name": "NVIDIA A10G", "memory-total-mib": 23028},
            "10": {"name": "NVIDIA A10G"},
            "2": {"name": "NVIDIA A10G"},
        },
        "pods.worker": "2/2",  # action-set nests a dotted key
        "empty": {},  # ops sets nothing for it
    }
    assert juju_results(results) == (
        'count: "3"\n'
        "gpus:\n"
        '  "0":\n'
        '    memory-total-mib: "23028"\n'
        "    name: NVIDIA A10G\n"
        '  "2":\n'
        "    name: NVIDIA A10G\n"
        '  "10":\n'
        "    name: NVIDIA A10G\n"
        "pods:\n"
        "  worker: 2/2\n"
    )
    assert juju_results(results, keys=("count",)) == 'count: "3"\n'


def test_an_empty_map_is_written_in_flow_style():
    assert readme_examples._GoYaml().document({"a": {}}) == "a: {}\n"
    assert juju_results({}) == "{}\n"
