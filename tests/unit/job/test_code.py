"""Shipped code without a cluster: packing is deterministic, unpacking checks the hash and stays
inside its directory, and each archive's modules import from that archive."""

from __future__ import annotations

import importlib
import io
import os
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peer.job.code import CodeArchive, CodeError, imports_from, pack, top_level_names, unpack
from peer.job.load import from_dict
from peer.job.spec import JobError
from tests.support import REPO
from tests.unit.job import wordcount


def write_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content)
        else:
            path.write_bytes(content)
    return root


def members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


names = st.text(st.sampled_from("abcxyz_"), min_size=1, max_size=6)
trees = st.dictionaries(
    st.lists(names, min_size=1, max_size=3).map("/".join).map(lambda n: f"{n}.py"),
    st.binary(max_size=40),
    min_size=1,
    max_size=6,
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=30)
@given(files=trees)
def test_a_directory_packs_to_the_same_bytes_and_unpacks_to_its_files(tmp_path_factory, files):
    root = tmp_path_factory.mktemp("src")
    files = {n: t for n, t in files.items() if not any(n.startswith(o + "/") for o in files)}
    write_tree(root, files)
    first, second = pack(root), pack(root)
    assert first.data == second.data
    unpacked = unpack(first.data, first.reference(), tmp_path_factory.mktemp("cache"))
    found = {p.relative_to(unpacked).as_posix(): p.read_bytes() for p in unpacked.rglob("*.py")}
    assert found == files


def test_caches_and_compiled_files_are_left_out(tmp_path):
    write_tree(tmp_path, {"m.py": "x = 1", "__pycache__/m.cpython-313.pyc": "", "a.pyc": "",
                          ".git/HEAD": "ref"})  # fmt: skip
    assert list(members(pack(tmp_path).data)) == ["m.py"]


def test_a_wheel_is_shipped_as_it_is(tmp_path):
    wheel = tmp_path / "shipped-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("shipped/__init__.py", "x = 1")
    archive = pack(wheel)
    assert archive == CodeArchive("shipped-1.0-py3-none-any.whl", wheel.read_bytes())


@pytest.mark.parametrize("name", ["code.tar.gz", "missing"])
def test_anything_but_a_wheel_or_a_directory_is_refused(tmp_path, name):
    (tmp_path / "code.tar.gz").write_bytes(b"not a wheel")
    with pytest.raises(CodeError, match=f"code '.*{name}' is neither a wheel"):
        pack(tmp_path / name)


def test_an_archive_that_is_not_the_one_the_job_names_is_refused(tmp_path):
    archive = pack(write_tree(tmp_path / "src", {"m.py": "x = 1"}))
    other = {"name": "src", "sha256": "0" * 64}
    with pytest.raises(CodeError, match=r"code 'src': the archive fetched has sha256 .* refused"):
        unpack(archive.data, other, tmp_path / "cache")
    assert not (tmp_path / "cache" / ("0" * 64)).exists()


@pytest.mark.parametrize(
    ("member", "why"),
    [("../evil.py", "would land outside it"), ("peer/__init__.py", "the runtime's own name")],
)
def test_an_archive_may_not_escape_or_replace_the_runtime(tmp_path, member, why):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(member, "x = 1")
    bad = CodeArchive("bad.whl", buffer.getvalue())
    with pytest.raises(CodeError, match=f"code 'bad.whl'.*{why}"):
        unpack(bad.data, bad.reference(), tmp_path / "cache")
    assert not (tmp_path / "evil.py").exists()
    assert [p.name for p in (tmp_path / "cache").iterdir()] == []


def test_each_archive_s_modules_import_from_it(tmp_path):
    """Two versions of one module: each import sees its own archive's, and a function taken
    from the first keeps working after the second was imported."""
    versions = []
    for value in ("one", "two"):
        src = write_tree(
            tmp_path / value, {"shipped_mod/__init__.py": f"def f():\n    return {value!r}\n"}
        )
        archive = pack(src)
        versions.append(unpack(archive.data, archive.reference(), tmp_path / "cache"))
    try:
        with imports_from(versions[0]):
            first = importlib.import_module("shipped_mod").f
        with imports_from(versions[1]):
            second = importlib.import_module("shipped_mod").f
        assert (first(), second()) == ("one", "two")
        assert str(versions[0]) not in sys.path
        assert top_level_names(versions[0]) == {"shipped_mod"}
    finally:
        sys.modules.pop("shipped_mod", None)


def test_a_job_names_its_code_by_name_and_hash():
    reference = {"name": "src", "sha256": "ab" * 32}
    job = from_dict({**wordcount.document(), "code": reference}, imports=False)
    assert job.to_dict()["code"] == reference
    with pytest.raises(JobError, match=r"job 'wc': code must be \{name, sha256\}"):
        from_dict({**wordcount.document(), "code": {**reference, "sha256": "x"}}, imports=False)


def test_an_archive_that_unpacks_to_too_much_is_refused(tmp_path, monkeypatch):
    archive = pack(write_tree(tmp_path / "src", {"big.py": "x" * 2000}))
    monkeypatch.setattr("peer.job.code.UNPACKED_LIMIT", 1000)
    assert len(archive.data) < 1000
    with pytest.raises(CodeError, match="code 'src' unpacks to 2,000 bytes, over the limit of"):
        unpack(archive.data, archive.reference(), tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_link_out_of_the_directory_is_refused_naming_it(tmp_path):
    """A link to a file beside the tree would ship that file's contents (a secret) in the
    archive uploaded with the job."""
    (tmp_path / "secret.txt").write_text("password")
    src = write_tree(tmp_path / "src", {"pkg/__init__.py": "x = 1"})
    (src / "pkg" / "leak.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(CodeError, match=r"'pkg/leak.txt' links outside the directory, to .*"
                                        r"secret.txt': only files"):  # fmt: skip
        pack(src)


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda d: (d / "dangling").symlink_to(d / "nowhere"), "'pkg/dangling' is a dangling"),
        (lambda d: ((d / "a").symlink_to(d / "b"), (d / "b").symlink_to(d / "a")),
         "'pkg/a' is a symlink loop"),
        (lambda d: (d / "up").symlink_to(d.parent.parent), "'pkg/up' is a symlink to a directory"),
        (lambda d: (d / "down").symlink_to(d), "'pkg/down' is a symlink to a directory"),
        (lambda d: (d / "etc").symlink_to("/etc"), "'pkg/etc' is a symlink to a directory"),
    ],
    ids=["dangling", "loop", "directory-out", "directory-in", "absolute-directory"],
)  # fmt: skip
def test_a_link_that_dangles_loops_or_names_a_directory_is_refused(tmp_path, make, why):
    src = write_tree(tmp_path / "src", {"pkg/__init__.py": "x = 1"})
    make(src / "pkg")
    with pytest.raises(CodeError, match=f"code '.*src': {why}"):
        pack(src)


def test_a_link_to_a_file_inside_the_directory_is_packed_as_that_file(tmp_path):
    src = write_tree(tmp_path / "src", {"pkg/impl.py": "def f():\n    return 1\n"})
    (src / "pkg" / "alias.py").symlink_to("impl.py")
    (src / "top.py").symlink_to(src / "pkg" / "impl.py")
    packed = members(pack(src).data)
    expected = b"def f():\n    return 1\n"
    assert packed == dict.fromkeys(("pkg/alias.py", "pkg/impl.py", "top.py"), expected)
    assert pack(src).data == pack(src).data


def test_a_socket_is_refused_without_being_opened(tmp_path):
    src = write_tree(tmp_path / "src", {"m.py": "x = 1"})
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(src / "control.sock"))
        with pytest.raises(CodeError, match=r"'control.sock' is a socket: only files"):
            pack(src)


PACK_IN_A_CHILD = """
import resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))
from peer.job.code import CodeError, pack
try:
    pack(Path(sys.argv[1]))
except CodeError as e:
    print(e)
else:
    print("packed")
"""


def pack_in_a_child(root: Path) -> str:
    """What packing ``root`` ends with, in a process of its own, bounded in time and memory: a
    packer that opened a FIFO would wait for a writer for ever, one that read /dev/zero would
    fill the memory."""
    result = subprocess.run(
        [sys.executable, "-c", PACK_IN_A_CHILD, str(root)],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_fifo_is_refused_without_being_opened(tmp_path):
    src = write_tree(tmp_path / "src", {"pkg/__init__.py": "x = 1"})
    os.mkfifo(src / "pkg" / "pipe")
    assert pack_in_a_child(src) == (
        f"code {str(src)!r}: 'pkg/pipe' is a FIFO: only files, and links to files inside the "
        "directory, are packed"
    )


def test_a_link_to_a_device_is_refused_without_being_read(tmp_path):
    src = write_tree(tmp_path / "src", {"m.py": "x = 1"})
    (src / "zeros").symlink_to("/dev/zero")
    assert "'zeros' links outside the directory, to '/dev/zero'" in pack_in_a_child(src)


def test_a_link_inside_the_directory_to_a_fifo_is_refused(tmp_path):
    """The FIFO lies in a directory left out of the walk, so only the link leads to it."""
    src = write_tree(tmp_path / "src", {"m.py": "x = 1", ".git/HEAD": "ref"})
    os.mkfifo(src / ".git" / "pipe")
    (src / "alias").symlink_to(".git/pipe")
    assert "'alias' links to a FIFO" in pack_in_a_child(src)


def test_sizes_are_checked_before_the_files_are_read(tmp_path, monkeypatch):
    monkeypatch.setattr("peer.job.code.UNPACKED_LIMIT", 1000)
    src = write_tree(tmp_path / "src", {"big.bin": b"x" * 1001})
    with pytest.raises(CodeError, match=r"'big.bin' is 1,001 bytes, over the limit of 1,000"):
        pack(src)
    (src / "big.bin").unlink()
    write_tree(src, {"a.py": "x" * 600, "b.py": "x" * 600})
    with pytest.raises(CodeError, match=r"'b.py' is 600 bytes, which brings the files to "
                                        r"1,200, over the limit of 1,000"):  # fmt: skip
        pack(src)


def test_a_wheel_over_the_limit_is_refused_by_its_size(tmp_path, monkeypatch):
    wheel = tmp_path / "big-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("big/__init__.py", "x = 1")
    monkeypatch.setattr("peer.job.code.ARCHIVE_LIMIT", 10)
    with pytest.raises(CodeError, match=r"big-1.0-py3-none-any.whl' is .* bytes, over the limit"):
        pack(wheel)
