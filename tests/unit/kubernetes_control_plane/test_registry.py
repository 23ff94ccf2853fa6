"""The worker registry kept in the peer databag."""

import json

import registry


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


def test_departed_nodes_stay_pending_until_deleted_or_back():
    before = registry.Registry(
        {"w/0": registry.Worker("ip-a", 0, 1), "w/1": registry.Worker("ip-b", 0, 1)}
    )
    after = registry.Registry({"w/1": registry.Worker("ip-b", 0, 1)})
    bag = {"pending-removal": json.dumps(["ip-old"])}
    assert registry.departed_nodes(bag, before, after) == ({"ip-old"}, {"ip-old", "ip-a"})
    back = registry.Registry({"w/2": registry.Worker("ip-old", 0, 1)})
    assert registry.departed_nodes(bag, None, back) == ({"ip-old"}, set())
