"""Unpacking a code bundle on a node: one safe extraction, the same where Python has tarfile's filters and where it
has none (Debian 12's 3.11.2, 3.10.0 to 3.10.11), against archives crafted to write outside the folder."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from crosstrain import packaging
from crosstrain.backends.base import archive_bootstrap
from crosstrain.databricks_task import UnsafeArchive, extract, unpack


@pytest.fixture(params=["data filter", "no filter"])
def filters(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs on this Python and as on one without extraction filters."""
    if request.param == "no filter":
        monkeypatch.delattr(tarfile, "data_filter")
    return str(request.param)


def _member(name: str, kind: bytes = tarfile.REGTYPE, *, link: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    return info


def _archive(path: Path, *members: tarfile.TarInfo) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for member in members:
            data = b"owned\n" if member.isfile() else b""
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return str(path)


CRAFTED: dict[str, Callable[[Path], list[tarfile.TarInfo]]] = {
    "an absolute name": lambda out: [_member(str(out / "abs"))],
    "a '..' name": lambda out: [_member("ok/../../dotdot")],
    "a symlink out, then a file through it": lambda out: [
        _member("link", tarfile.SYMTYPE, link=str(out)),
        _member("link/through"),
    ],
    "a relative symlink out": lambda out: [_member("up", tarfile.SYMTYPE, link="../..")],
    "a hard link to a file outside": lambda out: [_member("hard", tarfile.LNKTYPE, link=str(out / "target"))],
    "a character device": lambda out: [_member("null", tarfile.CHRTYPE)],
    "a block device": lambda out: [_member("disk", tarfile.BLKTYPE)],
    "a fifo": lambda out: [_member("pipe", tarfile.FIFOTYPE)],
}


@pytest.mark.parametrize("case", list(CRAFTED))
def test_a_crafted_archive_is_refused_and_writes_nothing_outside(tmp_path: Path, filters: str, case: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target").write_text("mine\n")
    dest = tmp_path / "a" / "b" / "dest"
    dest.mkdir(parents=True)
    archive = _archive(tmp_path / "crafted.tar.gz", *CRAFTED[case](outside))
    with pytest.raises(UnsafeArchive) as refused:
        extract(archive, str(dest))
    assert "outside the folder" in str(refused.value) or "holds only files and folders" in str(refused.value)
    assert sorted(p.name for p in outside.iterdir()) == ["target"]
    assert (outside / "target").read_text() == "mine\n"
    assert not (tmp_path / "dotdot").exists()
    assert not (tmp_path / "a" / "dotdot").exists()


def test_setuid_setgid_and_sticky_bits_are_dropped_and_modes_made_plain(tmp_path: Path, filters: str) -> None:
    archive = _archive(
        tmp_path / "modes.tar.gz",
        _member("dir", tarfile.DIRTYPE, mode=0o1777),
        _member("dir/tool", mode=0o4755),
        _member("dir/shared", mode=0o2666),
    )
    extract(archive, str(tmp_path / "dest"))
    modes = {name: stat.S_IMODE(os.stat(tmp_path / "dest" / "dir" / name).st_mode) for name in ("tool", "shared")}
    assert modes == {"tool": 0o755, "shared": 0o644}
    assert stat.S_IMODE(os.stat(tmp_path / "dest" / "dir").st_mode) & 0o7022 == 0


def test_a_bundle_unpacks_the_same_with_or_without_filters(tmp_path: Path, filters: str) -> None:
    """Where Python has no filters, `extractall(filter=...)` crashed `run --local`; the bundle now unpacks."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print(1)\n")
    (code / "run.sh").write_text("#!/bin/sh\n")
    (code / "run.sh").chmod(0o755)
    archive = tmp_path / packaging.ARCHIVE_NAME
    archive.write_bytes(packaging.bundle(code).archive())
    extract(str(archive), str(tmp_path / "dest"))
    user = tmp_path / "dest" / "crosstrain_code-1.0" / "crosstrain_code" / "src"
    assert (user / "train.py").read_text() == "print(1)\n"
    assert stat.S_IMODE((user / "run.sh").stat().st_mode) == 0o755


def test_the_databricks_launcher_refuses_a_crafted_archive(
    tmp_path: Path, filters: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CROSSTRAIN_UNPACK_DIR", str(tmp_path / "unpacked"))
    archive = _archive(tmp_path / "crafted.tar.gz", _member(str(tmp_path / "escaped")))
    with pytest.raises(UnsafeArchive):
        unpack(archive)
    assert not (tmp_path / "escaped").exists()


@pytest.mark.parametrize("without_filters", [False, True])
def test_the_fuse_bootstrap_refuses_a_crafted_archive(tmp_path: Path, without_filters: bool) -> None:
    """The container command itself, on this Python and on one without filters (where it extracted bare)."""
    archive = _archive(tmp_path / "crafted.tar.gz", _member("../../../escaped"), _member(str(tmp_path / "abs")))
    temp = tmp_path / "a" / "b" / "c"  # the bootstrap unpacks in a new folder here: ../../../ is tmp_path/a
    temp.mkdir(parents=True)
    prelude = "import tarfile; del tarfile.data_filter\n" if without_filters else ""
    program = f"{prelude}exec(compile({archive_bootstrap()!r}, '<bootstrap>', 'exec'))"
    run = subprocess.run(
        [sys.executable, "-c", program, archive, "--"],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(temp)},
        check=False,
    )
    assert run.returncode != 0
    assert "UnsafeArchive" in run.stderr
    assert not (tmp_path / "a" / "escaped").exists()
    assert not (tmp_path / "abs").exists()


def _read_shipped() -> str:
    return Path("data.txt").read_text()


def test_a_local_run_with_code_unpacks_where_python_has_no_filters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run --local` with `code:` crashed there: `extractall() got an unexpected keyword argument 'filter'`."""
    import crosstrain

    monkeypatch.delattr(tarfile, "data_filter")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "data.txt").write_text("shipped\n")
    assert crosstrain.run(_read_shipped, {"name": "unpack", "code": "src"}) == "shipped\n"
