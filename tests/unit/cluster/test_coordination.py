"""The coordination modes decided in one place (peer.cluster.coordination), and the settings a
member is refused at start (CoordinationModes.refusal)."""

from __future__ import annotations

import threading

import pytest

from peer.cluster.applier import Background, Sequential
from peer.cluster.coordination import Coordination
from peer.cluster.modes import CoordinationModes
from peer.log.feed import ClassicFeed
from peer.log.replica import Replica
from peer.log.stores.memory import MemoryLog
from peer.scheduling.client import SchedulingClient
from peer.scheduling.request import plan_here


def test_the_classic_protocol_unless_a_mode_asks() -> None:
    classic = Coordination(CoordinationModes())
    assert classic.watches_log
    assert not classic.takes_rumors
    assert classic.planner() is plan_here
    applier = classic.applier(Replica(), threading.Event(), plan_here)
    assert isinstance(applier, Sequential)
    assert isinstance(classic.feed(MemoryLog().session(), "g", None, lambda: None), ClassicFeed)
    assert classic.direct_join(None, None, (), ()) is None  # type: ignore[arg-type]
    assert classic.first_join(None)(threading.Event()) is None


def test_each_mode_chooses_its_part() -> None:
    modes = CoordinationModes(epidemic_log=True, async_allocation=True,
                              scheduler_servers=("h:1",))  # fmt: skip
    coordination = Coordination(modes)
    assert not coordination.watches_log
    assert coordination.takes_rumors
    planner = coordination.planner()
    assert isinstance(getattr(planner, "__self__", None), SchedulingClient)
    applier = coordination.applier(Replica(), threading.Event(), plan_here)
    try:
        assert isinstance(applier, Background)
    finally:
        applier.close()


def test_an_epidemic_log_without_a_transport_keeps_the_classic_feed() -> None:
    """A member embedded in one process has nobody to gossip with."""
    coordination = Coordination(CoordinationModes(epidemic_log=True))
    feed = coordination.feed(MemoryLog().session(), "g", None, lambda: None)
    assert isinstance(feed, ClassicFeed)


@pytest.mark.parametrize(
    ("setting", "mode"),
    [
        ({"join_direct_timeout": 5.0}, "--join-direct"),
        ({"gossip_fanout": 0}, "--epidemic-log"),
        ({"gossip_rounds": 4}, "--epidemic-log"),
        ({"log_read_after": 0.5}, "--epidemic-log"),
        ({"reorder_cache": 16}, "--epidemic-log"),
        ({"scheduler_timeout": 2.0}, "--scheduler-servers"),
    ],
)
def test_a_setting_of_a_mode_that_is_off_is_refused(setting: dict[str, float], mode: str) -> None:
    name = next(iter(setting))
    option = "--" + name.replace("_", "-")
    refusal = CoordinationModes(**setting).refusal()  # type: ignore[arg-type]
    assert refusal == (f"{option} is a setting of {mode}, which is off: turn {mode} on, "
                       f"or leave {option} out")  # fmt: skip
    on = {"--join-direct": {"join_direct": True}, "--epidemic-log": {"epidemic_log": True},
          "--scheduler-servers": {"scheduler_servers": ("h:1",)}}[mode]  # fmt: skip
    assert CoordinationModes(**setting, **on).refusal() is None  # type: ignore[arg-type]


def test_the_defaults_and_every_mode_on_are_not_refused() -> None:
    assert CoordinationModes().refusal() is None
    everything = CoordinationModes(join_direct=True, epidemic_log=True, async_allocation=True,
                                   scheduler_servers=("h:1",), gossip_fanout=0)  # fmt: skip
    assert everything.refusal() is None
