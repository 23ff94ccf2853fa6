"""The worker registry kept in the peer databag."""

import json

import registry

from charms.gpu_k8s.v0.kubernetes_cluster import WorkerInfo


def test_entries_stored_by_older_charms_still_load():
    bag = {
        "workers": json.dumps(
            {
                "kubernetes-worker/0": ["ip-a", 0, 7],
                "kubernetes-worker-gpu/0": ["ip-b", 4, 8, {"NVIDIA A10G": 4}],
                "kubernetes-worker-gpu/1": ["ip-c", 1, 8, {"NVIDIA L4": 1}, "1.36"],
            }
        )
    }
    known = registry.Registry.load(bag)
    assert known.versions() == {
        "kubernetes-worker/0": None,
        "kubernetes-worker-gpu/0": None,
        "kubernetes-worker-gpu/1": "1.36",
    }
    assert [w.node for w in known.gpu_workers] == ["ip-b", "ip-c"]
    assert known.units_of_relation(8) == ["kubernetes-worker-gpu/0", "kubernetes-worker-gpu/1"]


def test_save_writes_only_what_changed_and_round_trips():
    bag: dict[str, str] = {}
    known = registry.Registry({"w/0": registry.Worker("ip-a", 2, 3, {"NVIDIA L4": 2}, "1.36")})
    known.save(bag)
    saved = dict(bag)
    registry.Registry.load(bag).save(bag)
    assert bag == saved
    assert registry.Registry.load(bag) == known


class Writes(dict):
    """A databag that counts what is written to it."""

    def __init__(self, *args):
        super().__init__(*args)
        self.writes: list[str] = []

    def __setitem__(self, key, value):
        self.writes.append(key)
        super().__setitem__(key, value)


def test_a_hook_that_changed_no_worker_writes_nothing_and_a_change_is_written():
    bag = Writes()
    workers = {f"w/{i}": registry.Worker(f"ip-{i}", i % 2, 3, {}, "1.36") for i in range(50)}
    registry.Registry(workers).save(bag)
    bag.writes.clear()

    same = registry.Registry.load(bag)
    same.forget(["w/7"])
    same.record("w/7", None, None, 3)  # no info: nothing recorded
    same.workers["w/7"] = registry.Worker("ip-7", 1, 3, {}, "1.36")  # equal, not the same
    same.save(bag)
    assert bag.writes == []

    moved = registry.Registry.load(bag)
    moved.workers["w/7"] = registry.Worker("ip-7", 1, 3, {}, "1.37")
    moved.save(bag)
    assert bag.writes == ["workers"]
    assert registry.Registry.load(bag).versions()["w/7"] == "1.37"


def test_mig_models_are_listed_once_in_their_json_order():
    a100 = ("NVIDIA A100-SXM4-40GB", "0x20b0", {"1g.5gb": 7, "7g.40gb": 1})
    h100 = ("NVIDIA H100 80GB HBM3", None, {"1g.10gb": 7})
    workers = {
        f"w/{i}": registry.Worker(f"ip-{i}", 8, 3, {}, None, {m[0]: list(m[1:])})
        for i, m in enumerate([h100, a100, h100, a100])
    }
    found = registry.Registry(workers).mig_gpus()
    assert [m[0] for m in found] == [a100[0], h100[0]]
    assert found == sorted(found, key=lambda m: json.dumps(list(m), sort_keys=True))


def test_departed_nodes_stay_pending_until_deleted_or_back():
    before = registry.Registry(
        {"w/0": registry.Worker("ip-a", 0, 1), "w/1": registry.Worker("ip-b", 0, 1)}
    )
    after = registry.Registry({"w/1": registry.Worker("ip-b", 0, 1)})
    bag = {"pending-removal": json.dumps(["ip-old"])}
    assert registry.departed_nodes(bag, before, after) == ({"ip-old"}, {"ip-old", "ip-a"})
    back = registry.Registry({"w/2": registry.Worker("ip-old", 0, 1)})
    assert registry.departed_nodes(bag, None, back) == ({"ip-old"}, set())


def test_a_refusal_is_the_registrys_record_not_a_text_in_the_unit_line():
    """A worker's invalid-data line that says "(refused" is no refused request.

    The line is built from what the worker published (`read_worker`), so its text is the
    worker's to shape; whether a unit was refused is what `record` decided, stored as such.
    """
    known = registry.Registry()
    line = "kubernetes-worker/2: gpu-inventory.0.model is invalid (refused: it is mine)"
    known.record("kubernetes-worker/2", None, line, 3)
    known.record("kubernetes-worker/3", _info("w0"), None, 3)
    known.record("kubernetes-worker/4", _info("w0"), None, 3)

    refusal = "kubernetes-worker/4: node-name w0 is the node of kubernetes-worker/3 (refused)"
    assert known.refused() == ([refusal], [])
    assert known.invalid() == [line]
    bag: dict[str, str] = {}
    known.save(bag)
    assert registry.Registry.load(bag).refused() == ([refusal], [])
    assert registry.Registry.load(bag).invalid() == [line]
    known.forget(["kubernetes-worker/4"])
    known.save(bag)
    assert registry.Registry.load(bag).refused() == ([], [])


def _info(node: str) -> WorkerInfo:
    return WorkerInfo("unit", node, (), "1.36")
