"""The code archives of the jobs a peer group runs: fetched from checkpoint storage, checked
against the hash the job names and unpacked, in the background, before any task of the job
starts here (peer.job.code says what an archive is and how it is imported).

The group's thread never waits for an archive: ``directory`` starts the fetch and says "not
yet" until it is there, and ``on_ready`` tells the group to look again. An archive that cannot
be fetched, does not match its hash or does not unpack is the job's failure, with a message
naming the file. Unpacked archives no running job uses any more are removed: those this shelf
unpacked, and those it found in the cache when it was made, which an earlier run of a member on
this host left (it was killed, or it left while its jobs ran on elsewhere). What another member
sharing the cache unpacked since is that member's to remove.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor, Future
from pathlib import Path

from peer.job.code import CodeError, remove, unpack
from peer.runtime.checkpoints import CheckpointError, CheckpointStorage

log = logging.getLogger(__name__)


class CodeShelf:
    def __init__(
        self,
        cache: Path,
        storage: CheckpointStorage | None,
        pool: Executor,
        on_ready: Callable[[], None],
    ) -> None:
        self.cache, self.storage, self.pool, self.on_ready = cache, storage, pool, on_ready
        self.fetching: dict[str, Future[Path]] = {}
        self.unpacked: dict[str, Path] = {}
        self.failed: dict[str, Exception] = {}
        self.inherited = _archives(cache)

    def directory(self, job_id: str, code: Mapping[str, str]) -> Path | None:
        """Where the job's code is unpacked, or None while it is being fetched; CodeError when
        it cannot be had."""
        sha256 = code["sha256"]
        if sha256 in self.unpacked:
            return self.unpacked[sha256]
        if sha256 in self.failed:
            raise self.failed[sha256]
        pending = self.fetching.get(sha256)
        if pending is None:
            self.fetching[sha256] = self.pool.submit(self._fetch, job_id, code)
            self.fetching[sha256].add_done_callback(lambda _: self.on_ready())
            return None
        if not pending.done():
            return None
        del self.fetching[sha256]
        try:
            self.unpacked[sha256] = pending.result()
        except CodeError as e:
            self.failed[sha256] = e
            raise
        return self.unpacked[sha256]

    def _fetch(self, job_id: str, code: Mapping[str, str]) -> Path:
        if self.storage is None:
            raise CodeError(f"code {code['name']!r}: this group has no checkpoint storage to "
                            "fetch it from")  # fmt: skip
        try:
            data = self.storage.get_code(job_id, code["sha256"])
        except CheckpointError as e:
            raise CodeError(f"code {code['name']!r} cannot be fetched: {e}") from e
        return unpack(data, code, self.cache)

    def keep_only(self, used: Iterable[str]) -> None:
        """Remove the unpacked archives, this shelf's and those it inherited, whose hashes are
        not in ``used``."""
        wanted = set(used)
        self.failed = {sha: e for sha, e in self.failed.items() if sha in wanted}
        for sha256 in sorted(set(self.unpacked) - wanted):
            log.info("removing code %s: no job here uses it any more", sha256[:12])
            remove(self.cache, sha256)
            del self.unpacked[sha256]
        for sha256 in sorted(self.inherited - wanted - set(self.unpacked)):
            log.info("removing code %s: an earlier run left it and no job uses it", sha256[:12])
            remove(self.cache, sha256)
        self.inherited &= wanted


def _archives(cache: Path) -> set[str]:
    """The unpacked archives in ``cache`` (a staging directory's name starts with a dot)."""
    try:
        return {p.name for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")}
    except FileNotFoundError:
        return set()
