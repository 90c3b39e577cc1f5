"""Bad entries and bad jobs on a real cluster: an entry written straight into the log takes no
group and no client down, a job too deep or too large is refused at submit in one line, a
ZooKeeper node too small for an entry says so at once, and why a job was killed reaches the
person who submitted it."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

import pytest
import yaml
from kazoo.client import KazooClient

from peer import api
from peer.job.load import YamlLoader
from peer.log.entries.jobs import SUBMIT_JOB
from peer.log.entry import Entry
from peer.log.store import StoreError
from peer.values.limits import MAX_ENTRY_BYTES, MAX_LOGGED_CHARS
from tests.integration.failing_fns import FAILURE
from tests.support import REPO, assert_one_line_error, onyx, wait_for

pytestmark = pytest.mark.integration


def cluster_args(zookeeper, tenancy) -> list[str]:
    return ["--zookeeper", zookeeper.address, "--tenancy", tenancy]


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


def wordcount(tmp_path: Path, file: str = "job.yaml", **changes) -> tuple[Path, dict]:
    """The example word count with its paths in ``tmp_path``; ``changes`` go into its document."""
    job = yaml.load((REPO / "examples/wordcount/job.yaml").read_text(), Loader=YamlLoader)
    (tmp_path / "lines.jsonl").write_text("".join(
        json.dumps({"line": f"alpha beta gamma {i}"}) + "\n" for i in range(50)
    ))  # fmt: skip
    job["catalog"][0]["params"]["path"] = str(tmp_path / "lines.jsonl")
    job["catalog"][3]["params"]["path"] = str(tmp_path / "out" / "counts.jsonl")
    job.update(changes)
    path = tmp_path / file
    path.write_text(json.dumps(job) if file.endswith(".json") else yaml.safe_dump(job))
    return path, job


def replica_json(zookeeper, tenancy) -> dict | None:
    result = onyx("replica", "--json", *cluster_args(zookeeper, tenancy))
    return json.loads(result.stdout) if result.returncode == 0 else None


def ring_of(zookeeper, tenancy, groups: int) -> dict:
    """The replica once ``groups`` groups form one ring with no join in flight."""

    def formed():
        doc = replica_json(zookeeper, tenancy)
        ok = (
            doc is not None
            and len(doc["groups"]) == groups
            and len(doc["pairs"]) == (groups if groups > 1 else 0)
            and not doc["prepared"]
            and not doc["accepted"]
        )
        return doc if ok else None

    return wait_for(formed, 60, f"{groups} groups in the ring", interval=0.5)


def write_raw(zookeeper, tenancy, data: bytes) -> int:
    """An entry written into the log's znodes directly, as no client of ours would write it."""
    client = KazooClient(hosts=zookeeper.address)
    client.start(timeout=10)
    try:
        path = client.create(f"/onyx/{tenancy}/log/entry-", data, sequence=True)
    finally:
        client.stop()
        client.close()
    return int(path.rsplit("entry-", 1)[1])


def test_no_entry_written_into_the_log_takes_a_group_or_a_client_down(
    start_peer, zookeeper, tenancy, tmp_path
):
    first, second = start_peer(vpeers=1), start_peer(vpeers=1)
    ring_of(zookeeper, tenancy, 2)
    job, _ = wordcount(tmp_path)
    submitted = onyx("job", "submit", str(job), "--id", "waits", *cluster_args(zookeeper, tenancy))
    assert submitted.returncode == 0, submitted.stderr

    deep_doc = yaml.safe_load(job.read_text())
    deep_doc["catalog"][0]["params"] = nested(1000)
    deep = write_raw(zookeeper, tenancy, SUBMIT_JOB.entry(id="deep", job=deep_doc).encode())
    big_data = json.dumps({"fn": "no-such-kind", "args": {"blob": "b" * 900_000}}).encode()
    big = write_raw(zookeeper, tenancy, big_data)
    for group in (first, second):
        wait_for(lambda g=group: f"log entry {big} ignored" in g.output(), 60, "the big entry")
        assert f"log entry {deep} ignored (no kind, " in group.output()
        assert "nests deeper than the limit of 64 levels" in group.output()
        assert f"log entry {big} ignored ('no-such-kind', {len(big_data):,} bytes)" in (
            group.output()
        )
        assert max(map(len, group.output().splitlines())) < 3 * MAX_LOGGED_CHARS

    third = start_peer(vpeers=1)
    after = ring_of(zookeeper, tenancy, 3)
    assert all(p.process.poll() is None for p in (first, second, third))
    assert after["version"] > big
    assert "deep" not in after["jobs"]
    assert f"log entry {deep} ignored" in third.output()

    for when in ("replaying the entries", "booting from an origin made after them"):
        for command in (["replica"], ["replica", "--json"], ["job", "status", "waits"]):
            result = onyx(*command, *cluster_args(zookeeper, tenancy))
            assert result.returncode == 0, (when, command, result.stderr)
            assert len(result.stderr) < 6 * MAX_LOGGED_CHARS, (when, result.stderr)
        assert "waiting for peers" in result.stdout
        if when == "replaying the entries":
            gc = onyx("gc", *cluster_args(zookeeper, tenancy))
            assert gc.returncode == 0, gc.stderr
    assert all(p.process.poll() is None for p in (first, second, third))


@pytest.mark.parametrize(
    ("params", "words"),
    [
        (nested(1000), ["params nests deeper than the limit of 32 levels"]),
        (
            {"path": "in.jsonl", "blob": "x" * 5_000_000},
            ["params is 5,000,0", "bytes encoded", f"over the limit of {MAX_ENTRY_BYTES:,}"],
        ),
    ],
    ids=["deep", "large"],
)
def test_a_job_too_deep_or_too_large_is_refused_at_submit_in_one_line(
    zookeeper, tenancy, tmp_path, params, words
):
    path, job = wordcount(tmp_path, "job.json", id="bad")
    job["catalog"][0]["params"] = params
    path.write_text(json.dumps(job))
    result = onyx("job", "submit", str(path), *cluster_args(zookeeper, tenancy))
    assert_one_line_error(result, 1, "job 'bad'", "task 'read'", *words)


def test_the_zookeeper_store_refuses_an_entry_too_large_at_once(zookeeper, tenancy):
    """What fits the limit, ZooKeeper takes; one byte more is refused before it is sent."""
    with closing(api.connect(zookeeper.address, tenancy, create=True)) as store:
        envelope = len(Entry("kill-job", {"id": "j", "reason": ""}).encode())
        fits = Entry("kill-job", {"id": "j", "reason": "r" * (MAX_ENTRY_BYTES - envelope)})
        assert len(fits.encode()) == MAX_ENTRY_BYTES
        position = store.append(fits)
        over = Entry("kill-job", {"id": "j", "reason": "r" * (5_000_000 - envelope)})
        with pytest.raises(StoreError) as caught:
            store.append(over)
        assert str(caught.value) == (
            f"kill-job entry for 'j' is 5,000,000 bytes, {5_000_000 - MAX_ENTRY_BYTES:,} bytes "
            f"over the limit of {MAX_ENTRY_BYTES:,} of a log entry (ZooKeeper's jute.maxbuffer)"
        )
        assert store.tail() == position


def test_a_kill_says_why_and_another_job_under_a_known_id_is_refused(
    start_peer, zookeeper, tenancy, tmp_path
):
    start_peer(vpeers=1)
    ring_of(zookeeper, tenancy, 1)
    job, _ = wordcount(tmp_path, name="word count")
    args = cluster_args(zookeeper, tenancy)
    assert onyx("job", "submit", str(job), "--id", "wc", *args).returncode == 0
    status = onyx("job", "status", "wc", *args)
    assert status.stdout.strip() == "job wc (word count): waiting for peers (needs at least 4)"

    other, _ = wordcount(tmp_path, "other.yaml", name="word count", barrier_period=5)
    refused = onyx("job", "submit", str(other), "--id", "wc", *args)
    assert_one_line_error(refused, 1, "job 'wc'", "this id belongs to a job with other content")
    again = onyx("job", "submit", str(job), "--id", "wc", *args)
    assert (again.returncode, again.stdout.strip()) == (0, "wc")

    killed = onyx("job", "kill", "wc", *args)
    assert killed.stdout.strip() == "job wc (word count): killed: an operator killed it"
    for command in ("status", "wait"):
        shown = onyx("job", command, "wc", *args)
        assert shown.stdout.strip() == "job wc (word count): killed: an operator killed it"
        assert shown.returncode == (0 if command == "status" else 1)


def test_the_error_of_a_task_that_raises_reaches_status_and_wait(
    start_peer, zookeeper, tenancy, tmp_path
):
    start_peer(vpeers=2)
    start_peer(vpeers=2)
    ring_of(zookeeper, tenancy, 2)
    path, job = wordcount(tmp_path)
    job["catalog"][1]["fn"] = "tests.integration.failing_fns:split_fails"
    path.write_text(yaml.safe_dump(job))
    args = cluster_args(zookeeper, tenancy)
    assert onyx("job", "submit", str(path), "--id", "fails", *args).returncode == 0
    waited = onyx("job", "wait", "fails", "--timeout", "120", *args)
    assert waited.returncode == 1, waited.stderr
    expected = (
        "job fails: killed: job 'fails': task 'split' on peer ",
        f": ValueError: {FAILURE}",
    )
    for result in (waited, onyx("job", "status", "fails", *args)):
        line = result.stdout.strip()
        assert line.startswith(expected[0]), line
        assert line.endswith(expected[1]), line
