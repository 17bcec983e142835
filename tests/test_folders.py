"""A folder uploaded as it is (a Docker build context): its files under their own names, read as code is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crosstrain import folders
from crosstrain.uploads import UploadRefused


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _folder(root: Path, name: str = "ctx", **kwargs: Any) -> folders.Folder:
    return folders.folder(name, root, field="targets.x.path", noun="build context", **kwargs)


def test_a_folder_is_its_files_as_they_are_with_every_folder_entered(tmp_path: Path) -> None:
    """No layout and no runtime: the files under their own names; the folders entered (an empty one too) are
    listed, as a digest of the tree counts them; git's rules apply as to code, and a change moves the digest."""
    root = _tree(
        tmp_path / "ctx", {"Dockerfile": "FROM x\n", "conf/a.cfg": "a\n", "big.bin": "x", ".gitignore": "*.bin\n"}
    )
    (root / "empty").mkdir()
    made = _folder(tmp_path)
    assert [f.path for f in made.files] == [".gitignore", "Dockerfile", "conf/a.cfg"]
    assert made.dirs == ("conf", "empty")
    assert made.ignore_sources == (".gitignore",)
    assert made.folder == root.resolve()
    assert made.ref.folder == str(root.resolve())
    assert folders.check_folder_unchanged(made.ref, field="targets.x.path", noun="build context") == made
    (root / "conf" / "a.cfg").write_text("b\n")
    with pytest.raises(UploadRefused, match="changed since the request was rendered") as refused:
        folders.check_folder_unchanged(made.ref, field="targets.x.path", noun="build context")
    assert refused.value.problem.path == "targets.x.path"
    assert _folder(tmp_path).digest != made.digest


def test_a_folder_leaves_out_the_job_file_and_refuses_what_code_refuses(tmp_path: Path) -> None:
    root = _tree(tmp_path / "ctx", {"Dockerfile": "FROM x\n", "job.yaml": "name: j\n"})
    assert [f.path for f in _folder(tmp_path, job_file=root / "job.yaml").files] == ["Dockerfile"]
    (root / "key").symlink_to("/etc/hostname")
    with pytest.raises(UploadRefused, match="which leaves the build context") as refused:
        _folder(tmp_path)
    assert refused.value.problem.path == "targets.x.path: key"
    (root / "key").unlink()
    (tmp_path / "elsewhere").mkdir()
    (root / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UploadRefused, match=r"is a link to .*, outside the job file's folder"):
        _folder(root, "link")
    (root / "link").unlink()
    with pytest.raises(UploadRefused, match="outside the job's folder"):
        _folder(root, "../elsewhere")
    with pytest.raises(UploadRefused, match="holds no file to upload"):
        _folder(tmp_path, "elsewhere")
    with pytest.raises(UploadRefused, match="does not exist"):
        _folder(tmp_path, "missing")


# -- local data: a file or a folder, with its own ignore files ------------------------------------------------------
def _data(root: Path, name: str, **kwargs: Any) -> folders.Folder:
    return folders.local_data(
        name, root, field="inputs.m.path", noun="input", ignore_files=(".amlignore|.gitignore",), **kwargs
    )


def test_local_data_is_a_file_or_a_folder_read_by_its_own_ignore_files(tmp_path: Path) -> None:
    """A file is one blob under its own name, and not the same upload as a folder holding it; a folder is read by
    the first of its own root's ignore files (not the repository's, not a nested one)."""
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("data/\n*.csv\n")  # the repository keeps its data out of git
    root = _tree(tmp_path / "data", {"a.csv": "1\n", "sub/b.csv": "2\n", "sub/.gitignore": "*.csv\n"})
    made = _data(tmp_path, "data")
    assert [f.path for f in made.files] == ["a.csv", "sub/.gitignore", "sub/b.csv"]
    assert not made.is_file
    (root / ".gitignore").write_text("sub/\n")
    (root / ".amlignore").write_text("a.csv\n")  # the first that exists wins, as in azure-ai-ml
    assert [f.path for f in _data(tmp_path, "data").files] == [
        ".amlignore",
        ".gitignore",
        "sub/.gitignore",
        "sub/b.csv",
    ]
    one = _data(tmp_path, "data/a.csv")
    assert (one.is_file, [f.path for f in one.files], one.folder) == (True, ["a.csv"], (root / "a.csv").resolve())
    (tmp_path / "wrapped").mkdir()
    (tmp_path / "wrapped" / "a.csv").write_text("1\n")
    assert _data(tmp_path, "wrapped").digest != one.digest
    assert folders.check_folder_unchanged(one.ref, field="inputs.m.path", noun="input", data=True) == one
    (root / "a.csv").write_text("3\n")
    with pytest.raises(UploadRefused, match="changed since the request was rendered"):
        folders.check_folder_unchanged(one.ref, field="inputs.m.path", noun="input", data=True)


def test_local_data_outside_the_job_folder_only_when_said(tmp_path: Path) -> None:
    _tree(tmp_path / "shared", {"x.txt": "x\n"})
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    with pytest.raises(UploadRefused) as caught:
        _data(jobs, "../shared", outside_fix="say outside_job_folder: true")
    assert "outside the job file's folder" in caught.value.problem.message
    assert caught.value.problem.fix.endswith("or say outside_job_folder: true")
    assert [f.path for f in _data(jobs, "../shared", outside=True).files] == ["x.txt"]
    job_file = jobs / "job.yaml"
    job_file.write_text("name: x\n")
    with pytest.raises(UploadRefused, match="is the job file"):
        _data(jobs, "job.yaml", job_file=job_file)
