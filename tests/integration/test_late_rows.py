"""Rows behind the watermark, end to end with `onyx run`: a window that names a side output
sends them there as they came, and only there; its counts leave them out."""

from __future__ import annotations

import json

from peer.job.flow import Flow
from tests.support import onyx

TIMES = [1, 4, 12, 25, 26, 3, 27, 28, 14, 30, 31, 29]
"""Read one row a batch. The counting task takes one batch at a time, and the watermark sent
after a row with it at the latest, which it passes after that batch: by the time it takes a row,
it has passed the watermark of the row two before, at least. So 3 (two after 25), 14 (after
27) and 29 (after 30) are late whatever the timing, and the others, each above every row before
it, are not."""
LATE = [3, 14, 29]


def test_late_rows_go_to_the_side_output_alone(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"k": "a", "t": t}) + "\n" for t in TIMES))
    flow = Flow("late rows", barrier_period=None)
    read = flow.input("read", "peer.plugins.jsonl:input", path=str(rows), batch_size=1,
                      assign_watermark_fn="tests.integration.late_rows:time_of")  # fmt: skip
    counts = read.map("count", group_by_key="k", batch_size=1)
    counts.window("tens", "fixed", key="t", range=10, aggregation="count",
                  late="behind").trigger("watermark")  # fmt: skip
    counts.output("write", "peer.plugins.jsonl:output", path=str(tmp_path / "counts.jsonl"))
    counts.output("behind", "peer.plugins.jsonl:output", path=str(tmp_path / "late.jsonl"))
    job = tmp_path / "job.yaml"
    job.write_text(flow.to_yaml())
    result = onyx("run", str(job), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    late = [json.loads(line) for line in (tmp_path / "late.jsonl").read_text().splitlines()]
    counts_ = [json.loads(line) for line in (tmp_path / "counts.jsonl").read_text().splitlines()]
    assert late == [{"k": "a", "t": t} for t in LATE]
    on_time = [t for t in TIMES if t not in LATE]
    expected = {start: sum(start <= t < start + 10 for t in on_time) for start in (0, 10, 20, 30)}
    assert {c["start"]: c["value"] for c in counts_} == {s: n for s, n in expected.items() if n}
