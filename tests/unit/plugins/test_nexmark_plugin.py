"""The Nexmark input: every event once across checkpoints and a change of peers, a watermark
never past an event still to come, paced events no sooner than their time, and params out of
range refused naming the task and the setting."""

from __future__ import annotations

from collections import Counter
from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.job.flow import Flow
from peer.job.spec import JobError
from peer.nexmark.columns import EVENT_SCHEMA
from peer.nexmark.config import NexmarkConfig
from peer.nexmark.events import event
from peer.plugins import PluginError
from peer.plugins.nexmark import input as nexmark_input
from peer.plugins.splits import Splits, gather
from tests.unit.plugins.plugin_fixtures import EPOCH, drain, recovery, task

SPLITS = 8
PLUGIN = "peer.plugins.nexmark:input"


def reader(slot, slots, checkpoint=None, **params):
    spec = task(PLUGIN, name="events", **params)
    plugin = nexmark_input(spec, slot, slots, splits=Splits.of(slot, slots, SPLITS))
    plugin.recover(recovery(checkpoint))
    return plugin


def made(rows):
    return Counter(repr(sorted(row.items())) for row in rows)


@given(
    st.integers(0, 400), st.integers(1, 4), st.integers(1, 5),
    st.lists(st.integers(1, 60), max_size=6), st.integers(1, 30),
)  # fmt: skip
def test_every_event_is_made_once_across_a_checkpoint_and_a_change_of_peers(
    events, before, after, polls, group
):
    params = {"events": events, "out_of_order_group_size": group, "seed": 7}
    old = [reader(slot, before, **params) for slot in range(before)]
    rows = [row for plugin in old for limit in polls for row in plugin.poll(limit)]
    held = {slot: plugin.checkpoint(EPOCH) for slot, plugin in enumerate(old)}
    for slot in range(after):
        owned = Splits.of(slot, after, SPLITS).owned
        rows += drain(reader(slot, after, gather(held, before, owned, SPLITS), **params), 17)
    config = NexmarkConfig(events=events, out_of_order_group_size=group, seed=7)
    assert made(rows) == made(event(config, n) for n in range(events))


@given(st.integers(1, 300), st.integers(1, 40), st.integers(0, 5000), st.integers(1, 7))
def test_the_watermark_never_passes_an_event_still_to_come(events, group, delay, slots):
    params = {"events": events, "out_of_order_group_size": group, "watermark_delay_ms": delay,
              "rate": 1000.0}  # fmt: skip
    for slot in range(slots):
        plugin, marks = reader(slot, slots, **params), []
        while not plugin.completed():
            mark = plugin.watermark()
            assert all(row["dateTime"] >= mark for row in plugin.poll(5))
            marks.append(mark)
        assert marks == sorted(marks), "it never goes back"


def test_paced_events_come_no_sooner_than_their_time():
    """At 10 events a second, by a clock that the test moves: none before its time, and a
    restore goes on at the rate from where it stands rather than catching up."""
    clock = [100.0]
    with patch("peer.plugins.nexmark.time.monotonic", lambda: clock[0]):
        plugin = reader(0, 1, events=100, rate=10.0, paced=True)
        assert len(plugin.poll(50)) == 1, "event 0 is due at once"
        clock[0] += 0.55
        assert len(plugin.poll(50)) == 5, "events 1 to 5 are due by 0.55 s"
        assert plugin.poll(50) == [], "nothing more yet"
        checkpoint = plugin.checkpoint(EPOCH)
        clock[0] += 60
        again = reader(0, 1, checkpoint, events=100, rate=10.0, paced=True)
        assert [row["dateTime"] for row in again.poll(50)] == [
            event(NexmarkConfig(rate=10.0), 6)["dateTime"]
        ]


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"rate": -5}, "params: nexmark rate must be a number of events per second"),
        ({"paced": "yes"}, "params: paced must be true or false, got 'yes'"),
        ({"bids": 1}, "params: nexmark has no setting 'bids'"),
    ],
)
def test_params_out_of_range_are_refused_naming_task_and_setting(params, says):
    with pytest.raises(PluginError) as raised:
        reader(0, 1, **params)
    assert str(raised.value).startswith(f"task 'events', plugin '{PLUGIN}'")
    assert says in str(raised.value)


def test_a_job_with_a_setting_out_of_range_is_refused_at_submit():
    """In one line naming the job, the task and the setting, before any peer starts it."""
    flow = Flow("nexmark")
    flow.input("events", PLUGIN, events=10, rate=-5, n_peers=1).output(
        "write", "peer.plugins.null:output"
    )
    with pytest.raises(JobError) as raised:
        flow.job()
    message = str(raised.value)
    assert message.startswith("job: task 'events': params: nexmark rate must be")
    assert "\n" not in message


@given(st.integers(1, 200), st.integers(1, 50))
def test_arrow_batches_hold_the_events_the_rows_do(events, limit):
    rows = reader(0, 1, events=events, seed=4).poll(limit)
    batch = reader(0, 1, events=events, seed=4, format="arrow").poll(limit)
    assert batch.schema == EVENT_SCHEMA
    assert [{k: v for k, v in row.items() if v is not None} for row in batch.to_pylist()] == rows


def test_an_unknown_format_is_refused_naming_the_task():
    with pytest.raises(PluginError, match=r"task 'events'.*format must be one of rows, arrow"):
        reader(0, 1, events=3, format="csv")
