"""The recovery bench's parts: its members detect failures with `onyx peer start`'s shipped
settings unless told otherwise, its kills fall where their modes say, seeded, and its figures
are medians with their spread."""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

from bench import recovery
from bench.workload import DiscardingOutput, read_marks
from peer.membership.agent import MembershipSettings


def test_the_shipped_detection_is_the_membership_defaults():
    shipped = recovery.shipped_detection()
    defaults = MembershipSettings()
    assert shipped["heartbeat_interval"] == defaults.heartbeat_interval
    assert shipped["auto_down_unreachable_after"] == defaults.auto_down_unreachable_after
    assert shipped["session_timeout"] > 0


def test_settings_not_given_are_passed_as_shipped():
    args = argparse.Namespace(heartbeat_interval=None, auto_down=None, session_timeout=None)
    figures = recovery.detection(args)
    shipped = recovery.shipped_detection()
    assert figures["detector_shipped"]
    assert recovery.detector_flags(args) == [
        "--heartbeat-interval", str(shipped["heartbeat_interval"]),
        "--auto-down-unreachable-after", str(shipped["auto_down_unreachable_after"]),
        "--session-timeout", str(shipped["session_timeout"]),
    ]  # fmt: skip


def test_a_setting_given_overrides_and_one_a_bench_lacks_is_left_alone():
    args = argparse.Namespace(heartbeat_interval=0.5, auto_down=None, session_timeout=None)
    assert not recovery.detection(args)["detector_shipped"]
    rescale = argparse.Namespace(heartbeat_interval=0.5, auto_down=10.0)
    assert recovery.detector_flags(rescale) == [
        "--heartbeat-interval", "0.5", "--auto-down-unreachable-after", "10.0"
    ]  # fmt: skip


def test_kills_fall_in_their_modes_part_of_the_period_and_a_seed_replays_them():
    args = argparse.Namespace(barrier_period=10.0, slots=8)

    def kills(seed: int) -> list[recovery.Kill]:
        rng = random.Random(seed)
        return [recovery.draw(rng, mode, n, args) for n in range(20) for mode in recovery.MODES]

    drawn = kills(7)
    assert drawn == kills(7)
    assert drawn != kills(8)
    for kill in drawn:
        if kill.mode == "local":
            assert recovery.EARLY[0] <= kill.offset <= recovery.EARLY[1]
            assert kill.slot is None
        elif kill.mode == "local_barrier":
            before = args.barrier_period - kill.offset
            assert recovery.BEFORE_BARRIER[0] <= before <= recovery.BEFORE_BARRIER[1]
        else:
            assert 0 <= kill.offset <= args.barrier_period
            assert 0 <= kill.slot < args.slots
    assert len({k.offset for k in drawn if k.mode == "global"}) > 1


def test_a_figure_is_the_median_with_its_spread():
    assert recovery.spread_of("x_s", [3.0, 1.0, 2.0, 10.0], 3) == {
        "x_s": 2.5, "x_s_spread": [1.0, 10.0]
    }  # fmt: skip
    assert recovery.spread_of("x_s", [], 3) == {"x_s": None, "x_s_spread": None}


def test_a_summary_keeps_every_kill_and_skips_what_no_kill_has():
    kills = [{"recovery_s": r, "detection_s": None if r > 5 else r - 1,
              "barrier_in_recovery": r > 4} for r in (3.0, 4.5, 6.0)]  # fmt: skip
    figures = recovery.summary("global", kills)
    assert figures["global_kills"] == kills
    assert figures["global_recovery_s"] == 4.5
    assert figures["global_recovery_s_spread"] == [3.0, 6.0]
    assert figures["global_detection_s"] == 2.75  # of the kills whose detection was seen
    assert figures["global_kills_with_barrier_in_recovery"] == 2
    assert "global_task_recovered_s" not in figures


def test_restore_reads_are_what_each_member_read_since_the_kill():
    before = {1: 5 * recovery.MB, 2: 0.0, 3: 7 * recovery.MB}
    after = {1: 5 * recovery.MB, 2: 4 * recovery.MB, 3: 11 * recovery.MB, 4: 1 * recovery.MB}
    assert recovery.restore_reads(before, after) == {
        "restore_read_mb": [1.0, 4.0, 4.0], "restoring_slots": 3,
        "restore_read_slot_max_mb": 4.0, "restore_read_total_mb": 9.0,
    }  # fmt: skip


def test_the_discarding_output_notes_its_marks_whatever_its_records_are():
    with tempfile.TemporaryDirectory() as directory:
        output = DiscardingOutput(0, directory)
        output.prepare([{"seq": 1, "key": "k1", "n": 1}])
        output.write()
        output.close()
        assert read_marks(Path(directory)).written() == 1
