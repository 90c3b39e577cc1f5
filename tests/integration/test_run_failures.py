"""What a job met at run time reaches whoever runs it: `onyx run` of a job whose input file is
missing, whose sink cannot write, whose fn returns what cannot be written or whose segments lack
a window's time field or the field a task groups by ends with the job killed, the reason in one
line naming what is wrong, and exit 1; never a traceback. So does one whose fn raises to end the
process: a task's code cannot end it."""

from __future__ import annotations

import json
from pathlib import Path
from subprocess import CompletedProcess

import pytest
import yaml

from peer import api
from peer.cli import _run_job
from peer.cluster.local import LocalCluster
from peer.job.flow import Flow
from peer.log.replica import Replica
from tests.support import onyx, wait_for

pytestmark = pytest.mark.integration


def job(tmp_path: Path, *, source: Path, sink: Path, fn: str | None = None,
        windows: list | None = None, group_by_key: str | None = None,
        group_by_fn: str | None = None) -> Path:  # fmt: skip
    catalog = [
        {"name": "read", "kind": "input", "plugin": "peer.plugins.jsonl:input",
         "params": {"path": str(source)}, "n_peers": 1},
        {"name": "step", "kind": "function", "fn": fn or "tests.integration.pacing:pass_slowly",
         "group_by_key": group_by_key, "group_by_fn": group_by_fn},
        {"name": "write", "kind": "output", "plugin": "peer.plugins.jsonl:output",
         "params": {"path": str(sink)}, "n_peers": 1},
    ]  # fmt: skip
    doc = {"workflow": [["read", "step"], ["step", "write"]], "catalog": catalog,
           "barrier_period": None, "windows": windows or []}  # fmt: skip
    if windows:
        doc["triggers"] = [{"window": w["id"], "on": "segment", "threshold": 1} for w in windows]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def lines(tmp_path: Path, count: int = 5) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"n": i}) + "\n" for i in range(count)))
    return path


def killed(result, *words: str) -> str:
    """The line that says the job was killed, which holds each of ``words``."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stdout.splitlines() if ": killed: " in line]
    for word in words:
        assert word in line, line
    return line


def test_a_missing_input_file_is_named(tmp_path):
    missing = tmp_path / "no-such.jsonl"
    result = onyx("run", str(job(tmp_path, source=missing, sink=tmp_path / "out.jsonl")))
    killed(result, "task 'read'", str(missing), "No such file")


def test_a_sink_that_cannot_write_is_named(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    sink = blocker / "out.jsonl"
    result = onyx("run", str(job(tmp_path, source=lines(tmp_path), sink=sink)))
    killed(result, "task 'write'", str(sink))


def test_a_segment_that_cannot_be_written_is_named(tmp_path):
    result = onyx("run", str(job(tmp_path, source=lines(tmp_path), sink=tmp_path / "out.jsonl",
                                 fn="tests.integration.bulky:unencodable")))  # fmt: skip
    killed(result, "task 'write'", "not JSON-serialisable")


def test_segments_without_a_window_s_time_field_are_named(tmp_path):
    window = {"id": "per-minute", "task": "step", "type": "fixed", "aggregation": "count",
              "key": "at", "range": 60}  # fmt: skip
    result = onyx("run", str(job(tmp_path, source=lines(tmp_path), sink=tmp_path / "out.jsonl",
                                 windows=[window])))  # fmt: skip
    killed(result, "task 'step'", "window 'per-minute'", "no time field 'at'")


def test_segments_without_the_field_a_task_groups_by_are_named(tmp_path):
    """Grouped under no key, they would reach a peer that does not own their group: the job is
    killed naming itself, the task whose key it is, the field and the first such segment."""
    result = onyx("run", str(job(tmp_path, source=lines(tmp_path), sink=tmp_path / "out.jsonl",
                                 group_by_key="user")))  # fmt: skip
    line = killed(result, "task 'step' groups by 'user', which segment {'n': 0} lacks")
    job_id = line.split()[1].rstrip(":")
    assert f"killed: job {job_id!r}: " in line


def test_a_group_key_that_has_no_key_group_is_named(tmp_path):
    """A key its canonical JSON cannot hold hashes to no key group: the job is killed naming
    the task, the key and why, before the segment goes anywhere."""
    result = onyx("run", str(job(tmp_path, source=lines(tmp_path), sink=tmp_path / "out.jsonl",
                                 group_by_fn="tests.integration.bulky:set_key")))  # fmt: skip
    killed(result, "task 'step'", "frozenset({0})", "group key")


@pytest.mark.parametrize(
    ("fn", "raised"), [("exits", "SystemExit: 3"), ("interrupts", "KeyboardInterrupt")]
)
def test_a_fn_that_raises_to_end_the_process_fails_its_job_not_the_run(tmp_path, fn, raised):
    """A KeyboardInterrupt from the code is not a Ctrl-C: the run reports the job's failure."""
    result = onyx("run", str(job(tmp_path, source=lines(tmp_path), sink=tmp_path / "out.jsonl",
                                 fn=f"tests.integration.failing_fns:{fn}")))  # fmt: skip
    killed(result, "task 'step'", raised, "a task's code may not end its process")


class SlowToLook(LocalCluster):
    """A local cluster whose first look at the log, once armed, comes only when every job has
    finished: as when a job fails at once and the run's first read loses the race to it."""

    armed = False

    def replica(self) -> Replica:
        if self.armed:
            self.armed = False
            wait_for(lambda: all(s.finished for s in api.jobs(super(SlowToLook, self).replica())),
                     30, "every job finished")  # fmt: skip
        return super().replica()


def test_a_job_killed_before_the_run_first_looks_is_described_once(tmp_path, capsys):
    cluster = SlowToLook(groups=1, vpeers=3)
    cluster.start()
    try:
        cluster.await_ring(30)
        cluster.armed = True
        missing = tmp_path / "no-such.jsonl"
        loaded = api.load(job(tmp_path, source=missing, sink=tmp_path / "out.jsonl"))
        assert _run_job(cluster, loaded, 60) == 1
    finally:
        cluster.stop()
    killed(CompletedProcess([], 1, capsys.readouterr().out, ""), "task 'read'", str(missing))


def joined(tmp_path: Path, people: list[dict], sales: list[dict]) -> Path:
    """A regular join of two JSON-lines files, people by ``id``, sales by ``seller``."""
    paths = []
    for name, rows in (("people", people), ("sales", sales)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        paths.append(path)
    flow = Flow(barrier_period=None)
    left = flow.input("people", "peer.plugins.jsonl:input", path=str(paths[0]), n_peers=1)
    right = flow.input("sales", "peer.plugins.jsonl:input", path=str(paths[1]), n_peers=1)
    left.join("pairs", right, "regular", key="id", other_key="seller", ttl=10).output(
        "write", "peer.plugins.jsonl:output", path=str(tmp_path / "out.jsonl"), n_peers=1
    )
    path = tmp_path / "job.yaml"
    path.write_text(flow.to_yaml())
    return path


def test_a_join_row_without_its_key_kills_the_job_naming_the_task_and_field(tmp_path):
    job_file = joined(tmp_path, [{"id": 1}], [{"seller": 1}, {"buyer": 2}])
    killed(onyx("run", str(job_file), timeout=120), "'pairs'", "'seller'")


def test_join_keys_of_unequal_types_kill_the_job_naming_the_join_and_both_fields(tmp_path):
    job_file = joined(tmp_path, [{"id": 1}, {"id": 2}], [{"seller": "1"}])
    killed(onyx("run", str(job_file), timeout=120), "join 'pairs'", "left_key 'id' is int",
           "right_key 'seller' is str")  # fmt: skip
