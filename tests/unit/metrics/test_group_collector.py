"""The gauges a group serves are read off its state at scrape time; a store that cannot answer
leaves out what needs it instead of failing the scrape."""

from __future__ import annotations

from types import SimpleNamespace

from pyrsistent import pmap, pset

from peer.log.replica import Replica
from peer.log.store import StoreError
from peer.metrics import GroupCollector


class Unreachable:
    def tail(self) -> int:
        raise StoreError("ZooKeeper at zk:2181 is unreachable")


class Tail:
    def __init__(self, position: int) -> None:
        self.position = position

    def tail(self) -> int:
        return self.position


def state(replica: Replica, store, **extra):
    defaults = {"id": "a", "peers": [], "reported": set(), "origin": -1, "coordinators": {},
                "transport": None}  # fmt: skip
    return SimpleNamespace(**{**defaults, "replica": replica, "store": store, **extra})


def gauges(value) -> dict[str, float]:
    return {
        sample.name: sample.value
        for family in GroupCollector(lambda: value).collect()
        for sample in family.samples
        if not sample.labels
    }


RING = Replica(version=9, groups=pset(["a", "b"]), pairs=pmap({"a": "b", "b": "a"}))


def test_the_log_gauges_follow_the_store_s_tail():
    served = gauges(state(RING, Tail(12), origin=4))
    assert served["onyx_log_position"] == 9
    assert served["onyx_log_tail_position"] == 12
    assert served["onyx_log_lag"] == 3
    assert served["onyx_log_length"] == 8
    assert served["onyx_log_origin_position"] == 4


def test_an_unreachable_store_leaves_out_what_needs_it():
    served = gauges(state(RING, Unreachable()))
    assert served["onyx_log_position"] == 9
    assert "onyx_log_lag" not in served
    assert "onyx_log_tail_position" not in served
    assert served["onyx_ring_groups"] == 2


def test_a_watch_target_reported_dead_is_not_alive_until_the_ring_closes():
    assert gauges(state(RING, Tail(9)))["onyx_ring_watch_target_alive"] == 1
    assert gauges(state(RING, Tail(9), reported={"b"}))["onyx_ring_watch_target_alive"] == 0
    alone = Replica(version=3, groups=pset(["a"]))
    assert gauges(state(alone, Tail(3)))["onyx_ring_watch_target_alive"] == 1


def test_a_group_between_incarnations_serves_no_state():
    assert list(GroupCollector(lambda: None).collect()) == []
