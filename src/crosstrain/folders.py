"""A local folder uploaded as it is, file for file: Azure ML's Docker build context, which the platform builds an
image from. Unlike the code (`crosstrain.packaging`), no layout and no crosstrain runtime go around it; it is read
under the same rules (the job file's folder only, git's rules and the ignore files, no link out of it, regular
files with UTF-8 names, `packaging.Limits`) and named by the digest of what it holds, so `send` refuses a folder
that changed after the render.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crosstrain import ignores, uploads
from crosstrain.errors import Problem
from crosstrain.packaging import (
    IGNORE_FILES,
    CodeFile,
    CodeRef,
    Limits,
    _by_path,
    _check_name,
    _file_id,
    _hashed,
    _under,
    _walk,
    counted,
)
from crosstrain.uploads import UploadRefused


@dataclass(frozen=True)
class Folder:
    """A local folder uploaded file for file, as it is: its files under their own names, the folders the listing
    entered, and the digest of what it holds."""

    folder: Path  # its real path
    files: tuple[CodeFile, ...]  # paths relative to the folder, sorted
    #: Every folder under it that the listing entered (relative, sorted), empty ones too: a digest of the tree
    #: (azure-ai-ml's object hash) counts them.
    dirs: tuple[str, ...]
    ignore_sources: tuple[str, ...]
    ignore_files: tuple[str, ...]
    digest: str
    #: The job field that names the folder, for refusals.
    field: str
    #: The job file, relative to the folder, where it lies there: left out, as from a code bundle.
    job_file: str = ""

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def short(self) -> str:
        return self.digest[:32]

    @property
    def ref(self) -> CodeRef:
        return CodeRef(
            str(self.folder), self.digest, len(self.files), self.size, self.ignore_files, job_file=self.job_file
        )

    def describe(self) -> str:
        leave = "leaves" if len(self.ignore_sources) == 1 else "leave"
        less = [f"the job file {self.job_file}"] if self.job_file else []
        less += [f"what {' and '.join(self.ignore_sources)} {leave} out"] if self.ignore_sources else []
        ignored = f", less {' and '.join(less)}" if less else ""
        return f"{self.folder}: {counted(len(self.files), 'file')}, {self.size:,} bytes{ignored} (sha256 {self.short})"


_FOLDERS: dict[tuple[Any, ...], Folder] = {}
#: The folders this process listed, by digest: `send` after a render uses the render's (as `_MADE` for bundles).
_MADE_FOLDERS: dict[str, Folder] = {}


def folder(
    name: str,
    root: Path,
    *,
    field: str,
    noun: str,
    ignore_files: Sequence[str] = IGNORE_FILES,
    limits: Limits | None = None,
    job_file: Path | None = None,
) -> Folder:
    """The folder `name` (relative to `root`, the job file's folder) to upload as it is, or `UploadRefused` at
    `field`: it must lie under `root` (by its spelling and through any link), and what it holds is read as the
    code is (git's rules and `ignore_files`, no link out of it, regular files with UTF-8 names, `limits`), less
    `job_file` where it lies there."""
    path = uploads.local_path(name, root, field)
    real_root, real = Path(os.path.realpath(root)), Path(os.path.realpath(path))
    if not _under(real_root, real):
        raise UploadRefused(
            Problem(
                field,
                f"{name} is a link to {real}, outside the job file's folder {real_root}; crosstrain uploads only what "
                "lies under it",
                f"copy the {noun} under {real_root}",
            )
        )
    try:
        is_dir = stat.S_ISDIR(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        is_dir = False
    except OSError as exc:
        raise ignores.unreadable(str(path), field, exc) from None
    if not is_dir:
        what = "does not exist" if not path.exists() else "is not a folder"
        raise UploadRefused(Problem(field, f"{path} {what}", f"name the {noun}'s folder, relative to the job file"))
    path = real  # named by where it is (a link's name is not what is uploaded, nor what send lists again)
    _check_name(str(path), None, field)
    limits = limits or Limits()
    sources: set[str] = set()
    entered: list[str] = []
    rules = ignores.for_folder(path, ignore_files)
    listing = list(_walk(path, limits, rules, sources, field=field, noun=noun, dirs=entered))
    the_job_file = _file_id(job_file)
    left_out = next((rel for rel, _, info in listing if (info.st_dev, info.st_ino) == the_job_file), "")
    if left_out:
        listing = [item for item in listing if (item[2].st_dev, item[2].st_ino) != the_job_file]
    total = sum(info.st_size for _, _, info in listing)
    if total > limits.max_bytes:
        raise UploadRefused(Problem(field, f"{path} holds {total:,} bytes to upload; {limits.description}", limits.fix))
    if not listing:
        raise UploadRefused(Problem(field, f"{path} holds no file to upload", "check the folder and its ignore files"))
    key = (
        str(path),
        field,
        tuple(ignore_files),
        tuple(sorted(sources)),
        left_out,
        tuple(sorted(entered)),
        tuple((rel, info.st_size, info.st_mtime_ns, info.st_ino, info.st_mode) for rel, _, info in listing),
    )
    cached = _FOLDERS.get(key)
    if cached is not None:
        return cached
    files = tuple(sorted((_hashed(rel, p, info, prefix="", field=field) for rel, p, info in listing), key=_by_path))
    dirs = tuple(sorted(entered))
    digest = hashlib.sha256()
    for file in files:
        digest.update(f"{file.path}\0{int(file.executable)}\0{file.size}\0{file.sha256}\n".encode())
    for rel in dirs:
        digest.update(f"{rel}/\n".encode())
    made = Folder(path, files, dirs, tuple(sorted(sources)), tuple(ignore_files), digest.hexdigest(), field, left_out)
    for cache in (_FOLDERS, _MADE_FOLDERS):
        if len(cache) > 16:
            cache.clear()
    _FOLDERS[key] = made
    _MADE_FOLDERS[made.digest] = made
    return made


def check_folder_unchanged(ref: CodeRef, *, field: str, noun: str, limits: Limits | None = None) -> Folder:
    """The folder a request was rendered with, listed again; refused if it changed since."""
    rendered = _MADE_FOLDERS.get(ref.digest)
    if rendered is not None and (str(rendered.folder), rendered.ignore_files) == (ref.folder, ref.ignore_files):
        for file in rendered.files:  # a stat per file, no listing and no hashing: what was hashed is there
            assert file.source is not None
            try:
                info = file.source.stat()
            except OSError:
                info = None
            if info is None or (info.st_size, info.st_mtime_ns) != file.stamp:
                raise UploadRefused(
                    Problem(
                        field,
                        f"{ref.folder} changed since the request was rendered ({file.source} did)",
                        "render the request again",
                    )
                )
        return rendered
    where = Path(ref.folder)
    job_file = where / ref.job_file if ref.job_file else None
    made = folder(
        where.name,
        where.parent,
        field=field,
        noun=noun,
        ignore_files=ref.ignore_files,
        limits=limits,
        job_file=job_file,
    )
    if made.digest != ref.digest:
        raise UploadRefused(
            Problem(
                field,
                f"{ref.folder} changed since the request was rendered (sha256 {ref.digest[:32]}, now {made.short})",
                "render the request again",
            )
        )
    return made
