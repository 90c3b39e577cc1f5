"""The word-count job the tests share, as YAML, as plain data and as Python values."""

from __future__ import annotations

import copy
from typing import Any

from peer.job.spec import FlowCondition, Job, Lifecycle, Task

FNS = "tests.unit.job.fixtures_fns"

YAML = f"""
id: wc
workflow:
  - [read, split]
  - [split, count]
  - [count, write]
catalog:
  - name: read
    kind: input
    plugin: {FNS}:read_lines
    batch_size: 10
    max_batch_delay: 0.5
    n_peers: 1
    params: {{path: lines.txt, encodings: [utf-8]}}
  - name: split
    kind: function
    fn: {FNS}:split
    n_peers: 2
  - name: count
    kind: function
    fn: {FNS}.count
    group_by_key: [word]
    min_peers: 1
    max_peers: 4
    flux_policy: kill
    required_tags: [ssd]
  - name: write
    kind: output
    plugin: {FNS}:print_counts
lifecycles:
  - task: all
    after_batch: {FNS}:log_batch
flow_conditions:
  - from: split
    to: [count]
    predicate: {FNS}:is_long
    short_circuit: true
"""


def document() -> dict[str, Any]:
    """The same job as a fresh mapping each call, for tests to break one way each."""
    return copy.deepcopy(_DOCUMENT)


def built() -> Job:
    """The same job built in Python."""
    return Job(
        id="wc",
        workflow=(("read", "split"), ("split", "count"), ("count", "write")),
        catalog=(
            Task(
                "read",
                "input",
                plugin=f"{FNS}:read_lines",
                batch_size=10,
                max_batch_delay=0.5,
                n_peers=1,
                params={"path": "lines.txt", "encodings": ["utf-8"]},
            ),
            Task("split", "function", fn=f"{FNS}:split", n_peers=2),
            Task(
                "count",
                "function",
                fn=f"{FNS}.count",
                group_by_key=("word",),
                max_peers=4,
                flux_policy="kill",
                required_tags=("ssd",),
            ),
            Task("write", "output", plugin=f"{FNS}:print_counts"),
        ),
        lifecycles=(Lifecycle("all", after_batch=f"{FNS}:log_batch"),),
        flow_conditions=(FlowCondition("split", ("count",), f"{FNS}:is_long", True),),
    )


_DOCUMENT: dict[str, Any] = {
    "id": "wc",
    "workflow": [["read", "split"], ["split", "count"], ["count", "write"]],
    "catalog": [
        {
            "name": "read",
            "kind": "input",
            "plugin": f"{FNS}:read_lines",
            "batch_size": 10,
            "max_batch_delay": 0.5,
            "n_peers": 1,
            "params": {"path": "lines.txt", "encodings": ["utf-8"]},
        },
        {"name": "split", "kind": "function", "fn": f"{FNS}:split", "n_peers": 2},
        {
            "name": "count",
            "kind": "function",
            "fn": f"{FNS}.count",
            "group_by_key": ["word"],
            "min_peers": 1,
            "max_peers": 4,
            "flux_policy": "kill",
            "required_tags": ["ssd"],
        },
        {
            "name": "write",
            "kind": "output",
            "plugin": f"{FNS}:print_counts",
        },
    ],
    "lifecycles": [{"task": "all", "after_batch": f"{FNS}:log_batch"}],
    "flow_conditions": [
        {"from": "split", "to": ["count"], "predicate": f"{FNS}:is_long", "short_circuit": True}
    ],
}
