"""Every output takes an Arrow record batch as it takes rows: the row outputs write the rows the
batch holds (timestamps as seconds since the epoch, as a segment holds them), the null output
counts them."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pyarrow as pa

from peer.plugins import jsonl, memory, null
from tests.unit.plugins.plugin_fixtures import EPOCH, recovery, task

BATCH = pa.record_batch(
    {
        "id": [1, 2],
        "ts": pa.array([1_700_000_000_250_000, None], pa.timestamp("us", tz="UTC")),
    }
)
ROWS = [{"id": 1, "ts": 1_700_000_000.25}, {"id": 2, "ts": None}]


def started(plugin: Any) -> Any:
    plugin.recover(recovery())
    plugin.prepare(BATCH)
    assert plugin.write()
    return plugin


def test_the_jsonl_output_writes_the_batch_s_rows(tmp_path):
    path = tmp_path / "out.jsonl"
    plugin = started(
        jsonl.output(task("peer.plugins.jsonl:output", "output", path=str(path)), 0, 1)
    )
    plugin.close()
    assert [json.loads(line) for line in path.read_text().splitlines()] == ROWS


def test_the_exactly_once_jsonl_output_writes_the_batch_s_rows(tmp_path):
    made = task("peer.plugins.jsonl:exactly_once_output", "output", path=str(tmp_path))
    plugin = started(jsonl.exactly_once_output(made, 0, 1))
    plugin.checkpoint(EPOCH).durable.result()
    plugin.committed(EPOCH)
    plugin.drained().result()
    plugin.close()
    [file] = tmp_path.glob("*.jsonl")
    assert [json.loads(line) for line in file.read_text().splitlines()] == ROWS


def test_the_memory_output_collects_the_batch_s_rows():
    name = f"test-{uuid.uuid4().hex}"
    made = task("peer.plugins.memory:output", "output", "out", collection=name)
    started(memory.output(made, 0, 1))
    try:
        assert memory.collected(name) == {"out": ROWS}
    finally:
        memory.discard(name)


def test_the_null_output_counts_the_batch_s_rows():
    plugin = started(null.output(task("peer.plugins.null:output", "output"), 0, 1))
    assert plugin.written == 2
