"""`crosstrain.uploads`: what may be read from this machine for an upload, and where it may be written.

Real files, real symlinks, a real FIFO: nothing of ours is faked.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from crosstrain.errors import SpecError
from crosstrain.uploads import SizeLimit, UploadRefused, check_destination, join_destination, local_path, read_file

LIMIT = SizeLimit(100, "the platform takes at most 100 bytes", "make it smaller")


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    """A job folder beside a 'home' that holds a credentials file."""
    (tmp_path / "home" / ".aws").mkdir(parents=True)
    (tmp_path / "home" / ".aws" / "credentials").write_text("aws_secret_access_key = SECRET\n")
    folder = tmp_path / "job"
    (folder / "src").mkdir(parents=True)
    (folder / "train.py").write_text("print('train')\n")
    (folder / "src" / "model.py").write_text("print('model')\n")
    return folder


def test_a_file_under_the_folder_is_read(job_dir: Path) -> None:
    assert read_file("train.py", job_dir, "command", LIMIT) == b"print('train')\n"
    assert read_file("src/model.py", job_dir, "command", LIMIT) == b"print('model')\n"
    assert read_file(str(job_dir / "train.py"), job_dir, "command", LIMIT) == b"print('train')\n"
    assert read_file("src/../train.py", job_dir, "command", LIMIT) == b"print('train')\n"


def test_a_symlink_that_leaves_the_folder_is_refused_with_the_link_and_the_fix(job_dir: Path) -> None:
    credentials = job_dir.parent / "home" / ".aws" / "credentials"
    (job_dir / "evil.py").symlink_to(credentials)
    with pytest.raises(UploadRefused) as refused:
        read_file("evil.py", job_dir, "command", LIMIT)
    problem = refused.value.problem
    assert problem.path == "command"
    assert str(job_dir / "evil.py") in problem.message
    assert str(credentials) in problem.message
    assert "leaves the job's folder" in problem.message
    assert "copy the file" in problem.fix
    assert "SECRET" not in str(refused.value)


def test_a_symlinked_folder_that_leaves_is_refused(job_dir: Path) -> None:
    (job_dir / "code").symlink_to(job_dir.parent / "home" / ".aws")
    with pytest.raises(UploadRefused, match="is a symlink to") as refused:
        read_file("code/credentials", job_dir, "command", LIMIT)
    assert str(job_dir / "code") in refused.value.problem.message


def test_a_relative_link_out_and_a_chain_of_links_are_refused(job_dir: Path) -> None:
    (job_dir / "up.py").symlink_to("../home/.aws/credentials")
    (job_dir / "hop.py").symlink_to("up.py")  # a link to a link that leaves
    for name in ("up.py", "hop.py"):
        with pytest.raises(UploadRefused, match="leaves the job's folder"):
            read_file(name, job_dir, "command", LIMIT)


def test_a_symlink_inside_the_folder_reads_its_target(job_dir: Path) -> None:
    (job_dir / "alias.py").symlink_to("src/model.py")
    assert read_file("alias.py", job_dir, "command", LIMIT) == b"print('model')\n"


@pytest.mark.parametrize("name", ["../home/.aws/credentials", "src/../../home/.aws/credentials"])
def test_dot_dot_out_of_the_folder_is_refused(job_dir: Path, name: str) -> None:
    with pytest.raises(UploadRefused, match="outside the job's folder") as refused:
        read_file(name, job_dir, "command", LIMIT)
    assert "run crosstrain from a folder that holds it" in refused.value.problem.fix


def test_an_absolute_path_elsewhere_is_refused(job_dir: Path) -> None:
    with pytest.raises(UploadRefused, match="outside the job's folder"):
        read_file(str(job_dir.parent / "home" / ".aws" / "credentials"), job_dir, "command", LIMIT)
    with pytest.raises(UploadRefused, match="outside the job's folder"):
        local_path("/etc/passwd", job_dir, "command")


def test_nul_in_a_name_is_refused(job_dir: Path) -> None:
    with pytest.raises(UploadRefused, match="NUL"):
        read_file("train.py\x00.txt", job_dir, "command", LIMIT)


def test_a_fifo_a_folder_and_a_missing_file_are_refused_without_blocking(job_dir: Path) -> None:
    os.mkfifo(job_dir / "pipe.py")  # nobody writes: a blocking open or read would hang
    started = time.monotonic()
    with pytest.raises(UploadRefused, match="not a regular file"):
        read_file("pipe.py", job_dir, "command", LIMIT)
    assert time.monotonic() - started < 30  # a blocking open never returns; a loaded machine is only slow
    with pytest.raises(UploadRefused, match="not a regular file"):
        read_file("src", job_dir, "command", LIMIT)
    with pytest.raises(UploadRefused, match=r"cannot read missing\.py"):
        read_file("missing.py", job_dir, "command", LIMIT)


def test_the_size_limit_is_checked_with_the_limit_in_the_message(job_dir: Path) -> None:
    (job_dir / "at.py").write_bytes(b"x" * 100)
    (job_dir / "over.py").write_bytes(b"x" * 101)
    assert read_file("at.py", job_dir, "command", LIMIT) == b"x" * 100
    with pytest.raises(UploadRefused) as refused:
        read_file("over.py", job_dir, "command", LIMIT)
    problem = refused.value.problem
    assert problem.message == "over.py is 101 bytes; the platform takes at most 100 bytes, so at most 100 bytes"
    assert problem.fix == "make it smaller"


def test_a_base64_limit_counts_the_encoded_size() -> None:
    # 10 MB of base64 is 7.5 MB of file: 4 characters for every 3 bytes.
    assert SizeLimit.base64(10_000_000, "", "").max_bytes == 7_500_000
    assert SizeLimit.base64(10, "", "").max_bytes == 6


def test_an_upload_refusal_is_a_spec_error_with_exit_2(job_dir: Path) -> None:
    with pytest.raises(SpecError) as refused:
        read_file("../x.py", job_dir, "command", LIMIT)
    assert refused.value.exit_code == 2
    assert refused.value.to_dict()["problems"] == [refused.value.problems[0].to_dict()]


@pytest.mark.parametrize(
    ("path", "absolute", "what"),
    [
        ("/Workspace/../..", True, "'..' part"),
        ("/Workspace/Shared/../../etc", True, "'..' part"),
        ("/Workspace/./x", True, "'.' or '..' part"),
        ("/Workspace//x", True, "empty part"),
        ("/Workspace/x/", True, "empty part"),
        ("/Workspace/x\x00y", True, "control character"),
        ("/Workspace/x\ny", True, "control character"),
        ("Workspace/x", True, "not an absolute path"),
        ("", True, "is empty"),
        ("..", False, "'..' part"),
        ("a/../../b", False, "'..' part"),
        ("/etc/passwd", False, "absolute path"),
        ("a\\..\\b", False, "backslash"),
        ("a//b", False, "empty part"),
    ],
)
def test_a_destination_with_traversal_is_refused(path: str, absolute: bool, what: str) -> None:
    with pytest.raises(UploadRefused) as refused:
        check_destination(path, "targets.x.folder", absolute=absolute)
    problem = refused.value.problem
    assert problem.path == "targets.x.folder"
    assert what in problem.message
    assert problem.fix


def test_safe_destinations_pass() -> None:
    assert check_destination("/Workspace/Shared/crosstrain", "f", absolute=True) == "/Workspace/Shared/crosstrain"
    assert check_destination("src/train.py", "f", absolute=False) == "src/train.py"
    assert check_destination("..hidden.py", "f", absolute=False) == "..hidden.py"  # a name, not a '..' part
    assert join_destination("/Workspace/a/", "train.py", "f") == "/Workspace/a/train.py"
    with pytest.raises(UploadRefused):
        join_destination("/Workspace/a", "../b.py", "f")
