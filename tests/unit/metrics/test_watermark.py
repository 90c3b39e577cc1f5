"""A task's watermark gauge, read back by job and task alone (what the benchmark samples)."""

from __future__ import annotations

from peer.metrics import task_meters, watermark_of


def test_a_task_s_watermark_reads_back_by_its_job_and_task():
    assert watermark_of("wm-job", "wm-task") is None
    task_meters("wm-job", "wm-task").watermark.set(1234.0)
    task_meters("wm-job", "other").watermark.set(9.0)
    assert watermark_of("wm-job", "wm-task") == 1234.0
