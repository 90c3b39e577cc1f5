"""The backends keyed state is held in: the same entries, in the same order, in memory and in
RocksDB on disk; a disk backend's directory goes when it closes, and what a process no longer
running left is swept."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.state.backends import Backend, DiskBackend, MemoryBackend, StateStoreError, sweep
from tests.support import wait_for

NAMES = st.sampled_from(["a", "ab", "b", "é", "count"])
TEXTS = st.sampled_from(['"k"', '"ka"', "1", "[1,2]", '"é"', "null"])
WRITES = st.lists(
    st.tuples(st.booleans(), st.integers(0, 300), NAMES, TEXTS, st.integers(-3, 3)), max_size=30
)


@contextlib.contextmanager
def _disk() -> Iterator[DiskBackend]:
    """A disk backend in a temporary directory, for one hypothesis example."""
    with tempfile.TemporaryDirectory(prefix="backend-") as directory:
        backend = DiskBackend(Path(directory, "state"))
        try:
            yield backend
        finally:
            backend.close()


def every(backend: Backend) -> list[tuple[int, str, str, list]]:
    """(key group, state, key, entry) of every entry, as ``states`` gives them."""
    return [
        (g, n, e[0], e) for g in backend.groups() for n, held in backend.states(g) for e in held
    ]


@given(WRITES)
def test_memory_and_disk_hold_the_same_entries_in_the_same_order(writes) -> None:
    """Puts and deletes in any order; each backend gives key groups in order and, within one,
    entries by state name and then canonical key, as the memory backend sorts them."""
    memory = MemoryBackend()
    with _disk() as disk:
        for put, group, name, text, value in writes:
            entry = [text, value, float("inf")]
            if put:
                memory.put(group, name, text, entry)
                disk.put(group, name, text, entry)
            else:
                assert memory.delete(group, name, text) == disk.delete(group, name, text)
        assert every(disk) == every(memory)
        for _, group, name, text, _ in writes:
            assert disk.get(group, name, text) == memory.get(group, name, text)
    held = every(memory)
    assert held == sorted(held, key=lambda e: (e[0], e[1], e[2]))


def test_closing_a_disk_backend_deletes_its_directory(tmp_path: Path) -> None:
    backend = DiskBackend(tmp_path / "slot")
    backend.put(3, "count", '"k"', ["k", 1, float("inf")])
    assert (tmp_path / "slot").is_dir()
    backend.close()
    assert not (tmp_path / "slot").exists()


def test_a_disk_backend_that_cannot_open_names_its_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(
        StateStoreError, match=f"keyed state on disk in {blocker}/slot could not open"
    ):
        DiskBackend(blocker / "slot")


def test_a_sweep_deletes_what_processes_no_longer_running_left(tmp_path: Path) -> None:
    """Gone: a process that has ended and been reaped, and one killed and not yet reaped (a
    zombie, as a member's killed process is until its parent waits for it)."""
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed.send_signal(signal.SIGKILL)
    try:
        wait_for(lambda: zombie(killed.pid), 10, "the killed process to be a zombie")
        gone, dead = tmp_path / ended.stdout.strip(), tmp_path / str(killed.pid)
        mine, other = tmp_path / str(os.getpid()), tmp_path / "notes"
        for directory in (gone / "slot", dead / "slot", mine / "slot", other):
            directory.mkdir(parents=True)
        assert sweep(tmp_path) == sorted([gone, dead])
    finally:
        killed.wait()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, "notes"])
    assert sweep(tmp_path / "none") == []


def zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
