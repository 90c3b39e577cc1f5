"""Triggers over a task's windows: when each kind fires, what it emits, what refinement does,
and how the watermark closes extents and drops late segments."""

from __future__ import annotations

import math
from typing import Any

from prometheus_client import REGISTRY

from peer.job.spec import Trigger, Window
from tests.unit.state import state_fns
from tests.unit.state.windowed import FNS, closed, seg, state

COUNT = Window("w", "agg", "fixed", "count", key="t", range=10)
SUM = Window("w", "agg", "fixed", "sum", key="t", range=10, field="v")
ON_WATERMARK = Trigger("w", "watermark")


def fired(key: Any, start: float, end: float, value: Any, window: str = "w") -> dict[str, Any]:
    return {"window": window, "key": key, "start": start, "end": end, "value": value}


def test_segment_trigger_fires_every_threshold_segments_per_key_and_extent():
    s = state((COUNT,), (Trigger("w", "segment", threshold=2),))
    batch = [seg("a", 1), seg("a", 2), seg("b", 3), seg("a", 11), seg("a", 4), seg("b", 5)]
    assert s.apply([*batch, seg("a", 12)], now=0) == [
        fired("a", 0, 10, 2),
        fired("b", 0, 10, 2),
        fired("a", 10, 20, 2),
    ]
    assert s.apply([seg("a", 5)], now=0) == [fired("a", 0, 10, 4)]


def test_discarding_forgets_the_extent_it_fired():
    s = state((COUNT,), (Trigger("w", "segment", threshold=2, refinement="discarding"),))
    assert s.apply([seg("a", 1), seg("a", 2), seg("a", 3)], now=0) == [fired("a", 0, 10, 2)]
    assert s.snapshot()["windows"]["w"] == [["a", [[0, 10, 1, [1]]]]]
    assert s.apply([seg("a", 4)], now=0) == [fired("a", 0, 10, 2)]
    assert s.snapshot()["windows"]["w"] == []


def test_discarding_and_accumulating_as_the_watermark_sees_them():
    def run(refinement: str) -> list[Any]:
        punctuation = Trigger("w", "punctuation", predicate=f"{FNS}:is_last", refinement=refinement)
        s = state((COUNT,), (punctuation, ON_WATERMARK))
        out = s.apply([seg("a", 1), seg("a", 2, last=True), seg("a", 3)], now=0)
        return out + closed(s.watermark(10))

    assert run("accumulating") == [fired("a", 0, 10, 2), fired("a", 0, 10, 3)]
    assert run("discarding") == [fired("a", 0, 10, 2), fired("a", 0, 10, 1)]


def test_timer_trigger_fires_every_extent_each_period():
    s = state((COUNT,), (Trigger("w", "timer", period=5),))
    assert s.tick(100) == []
    assert s.apply([seg("b", 12), seg("a", 1)], now=102) == []
    assert s.tick(104.9) == []
    assert s.tick(105) == [fired("a", 0, 10, 1), fired("b", 10, 20, 1)]
    assert s.tick(109) == []
    assert s.apply([seg("a", 2)], now=110) == [fired("a", 0, 10, 2), fired("b", 10, 20, 1)]


def test_watermark_fires_each_extent_once_and_drops_it():
    s = state((SUM,), (ON_WATERMARK,))
    assert s.apply([seg("a", 1, v=1), seg("a", 15, v=2), seg("b", 9.5, v=3)], now=0) == []
    assert closed(s.watermark(10)) == [fired("a", 0, 10, 1), fired("b", 0, 10, 3)]
    assert s.snapshot()["windows"]["w"] == [["a", [[10, 20, 2, [1]]]]]
    assert closed(s.watermark(10)) == []
    assert closed(s.watermark(5)) == []
    assert closed(s.watermark(20)) == [fired("a", 10, 20, 2)]
    assert s.snapshot() == {"watermark": 20, "windows": {"w": []}}


def late_metric(window: str) -> float:
    labels = {"onyx_job": "j", "task": "agg", "window": window}
    return REGISTRY.get_sample_value("onyx_window_late_segments_total", labels) or 0.0


def test_late_segments_are_counted_and_dropped():
    s = state((SUM,), (ON_WATERMARK,))
    closed(s.watermark(20))
    assert s.apply([seg("a", 19.5, v=7), seg("a", 3, v=7), seg("a", 20, v=1)], now=0) == []
    assert s.late == 2
    assert closed(s.finish()) == [fired("a", 20, 30, 1)]


def test_late_is_counted_per_window_with_event_time():
    windows = (SUM, Window("g", "agg", "global", "count"))
    s = state(windows, (ON_WATERMARK, Trigger("g", "watermark")))
    before = late_metric("w")
    closed(s.watermark(10))
    assert s.apply([seg("a", 5), seg("a", 15)], now=0) == []
    assert s.late == 1
    assert late_metric("w") == before + 1, "as a metric too"
    assert late_metric("g") == 0, "a global window has no event time"
    assert closed(s.finish()) == [
        fired("a", 10, 20, 1),
        fired("a", -math.inf, math.inf, 2, window="g"),
    ]


def test_a_segment_can_bridge_sessions_whose_states_then_merge():
    sessions = Window("s", "agg", "session", "collect", key="t", gap=5)
    s = state((sessions,), (Trigger("s", "watermark"),))
    ts = [1, 4, 8, 20, 16]
    s.apply([seg("a", t) for t in ts], now=0)
    assert [extent[:2] for extent in s.snapshot()["windows"]["s"][0][1]] == [[1, 13], [16, 25]]
    s.apply([seg("a", 12)], now=0)
    [event] = closed(s.watermark(25))
    assert (event["start"], event["end"]) == (1, 25)
    # each session keeps its arrival order, the earlier session first; the bridging segment last
    assert [segment["t"] for segment in event["value"]] == [1, 4, 8, 20, 16, 12]


def test_punctuation_fires_every_extent_the_segment_falls_in():
    sliding = Window("w", "agg", "sliding", "count", key="t", range=10, slide=5)
    s = state((sliding,), (Trigger("w", "punctuation", predicate=f"{FNS}:is_last"),))
    assert s.apply([seg("a", 7), seg("a", 3)], now=0) == []
    assert s.apply([seg("a", 8, last=True)], now=0) == [fired("a", 0, 10, 3), fired("a", 5, 15, 2)]


def test_sync_sees_the_event_and_emit_makes_the_segments():
    state_fns.SYNCED.clear()
    trigger = Trigger("w", "watermark", emit=f"{FNS}:total", sync=f"{FNS}:record")
    s = state((SUM,), (trigger,))
    s.apply([seg("a", 1, v=5)], now=0)
    assert closed(s.watermark(10)) == [{"user": "a", "at": 10, "total": 5}]
    assert [{**fired("a", 0, 10, 5), "task": "agg"}] == state_fns.SYNCED


def test_emit_may_return_a_list_or_nothing():
    twice = Trigger("w", "watermark", emit=f"{FNS}:twice")
    nothing = Trigger("w", "watermark", emit=f"{FNS}:nothing")
    s = state((SUM,), (twice, nothing))
    s.apply([seg("a", 1, v=5)], now=0)
    assert closed(s.watermark(10)) == [5, 5]


def test_finish_closes_global_windows_and_everything_left():
    windows = (Window("g", "agg", "global", "average", field="v"), SUM)
    s = state(windows, (Trigger("g", "watermark"), ON_WATERMARK))
    s.apply([seg("b", 1, v=4), seg("a", 1000, v=1), seg("a", 5, v=2)], now=0)
    assert closed(s.watermark(100)) == [fired("a", 0, 10, 2), fired("b", 0, 10, 4)]
    assert closed(s.finish()) == [
        fired("a", -math.inf, math.inf, 1.5, window="g"),
        fired("b", -math.inf, math.inf, 4.0, window="g"),
        fired("a", 1000, 1010, 1),
    ]
    assert closed(s.finish()) == []
    assert s.snapshot()["windows"] == {"g": [], "w": []}


def test_keys_of_several_fields_and_no_key():
    def by_user_and_region(segment: dict[str, Any]) -> Any:
        return [segment["user"], segment["region"]]

    s = state((COUNT,), (ON_WATERMARK,), key_of=by_user_and_region)
    s.apply([seg("a", 1, region="eu"), seg("a", 2, region="us"), seg("a", 3, region="eu")], 0)
    assert closed(s.finish()) == [fired(["a", "eu"], 0, 10, 2), fired(["a", "us"], 0, 10, 1)]
    ungrouped = state((COUNT,), (ON_WATERMARK,), key_of=None)
    ungrouped.apply([seg("a", 1), seg("b", 2)], now=0)
    assert closed(ungrouped.finish()) == [fired(None, 0, 10, 2)]


def test_only_the_windows_of_the_task():
    s = state((COUNT, Window("o", "write", "global", "count")), (ON_WATERMARK,))
    assert [w.window.id for w in s.windows] == ["w"]
