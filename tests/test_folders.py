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
