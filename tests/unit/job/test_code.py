"""Shipped code without a cluster: packing is deterministic, unpacking checks the hash and stays
inside its directory, and each archive's modules import from that archive."""

from __future__ import annotations

import importlib
import io
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peer.job.code import CodeArchive, CodeError, imports_from, pack, top_level_names, unpack
from peer.job.load import from_dict
from peer.job.spec import JobError
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
    monkeypatch.setattr("peer.job.code.UNPACKED_LIMIT", 1000)
    archive = pack(write_tree(tmp_path / "src", {"big.py": "x" * 2000}))
    assert len(archive.data) < 1000
    with pytest.raises(CodeError, match="code 'src' unpacks to 2,000 bytes, over the limit of"):
        unpack(archive.data, archive.reference(), tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []
