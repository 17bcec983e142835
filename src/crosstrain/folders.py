"""A local folder uploaded as it is, file for file: Azure ML's Docker build context, which the platform builds an
image from, and a local file or folder a job names as data (`local_data`), which Azure ML uploads to the
workspace's blob store. Unlike the code (`crosstrain.packaging`), no layout and no crosstrain runtime go around
it; it is read under the same rules (the job file's folder only unless the job says otherwise, no link out of it,
regular files with UTF-8 names, `packaging.Limits`, the job file left out) and named by the digest of what it
holds, so `send` refuses a folder that changed after the render. A build context is read with git's rules and
the ignore files, as code is; data with its own ignore files only (`ignores.own_rules`).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crosstrain import ignores, reads, uploads
from crosstrain.errors import Problem
from crosstrain.frozen import frozen
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


@frozen
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
    #: A single file (a data input), named by `folder`: `files` holds it under its own name.
    is_file: bool = False
    #: Read with git's rules, then `ignore_files` (code's way); False: its own ignore files only (data's way).
    git_rules: bool = True

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
        if self.is_file:
            return f"{self.folder}: {self.size:,} bytes (sha256 {self.short})"
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
    reads.read(None)  # read as it is: a render that reads one is not remembered
    path = _confined(name, root, field=field, noun=noun, outside=False, fix=f"copy the {noun} under {{root}}")
    return _read(path, field=field, noun=noun, ignore_files=ignore_files, limits=limits, job_file=job_file)


def local_data(
    name: str,
    root: Path,
    *,
    field: str,
    noun: str,
    ignore_files: Sequence[str],
    limits: Limits | None = None,
    job_file: Path | None = None,
    outside: bool = False,
    outside_fix: str = "",
) -> Folder:
    """The local file or folder `name` (relative to `root`, the job file's folder) a job reads as data, to upload
    as it is, or `UploadRefused` at `field`: under `root` unless `outside` (the job said so by name; `outside_fix`
    says how), a folder read with its own ignore files only (`ignores.own_rules` of `ignore_files`), no link out of
    it, regular files with UTF-8 names, `limits`; the job file is never uploaded."""
    reads.read(None)
    fix = f"copy the {noun} under {{root}}" + (f", or {outside_fix}" if outside_fix else "")
    path = _confined(name, root, field=field, noun=noun, outside=outside, fix=fix, spelled=True)
    return _read(
        path,
        field=field,
        noun=noun,
        ignore_files=ignore_files,
        limits=limits,
        job_file=job_file,
        git_rules=False,
        files=True,
    )


def _confined(name: str, root: Path, *, field: str, noun: str, outside: bool, fix: str, spelled: bool = False) -> Path:
    """`name` resolved against `root`; refused where it leaves `root` by its spelling or through a link, unless
    `outside`. `fix` (with `{root}`) says what to do, also for a name that leaves it by its spelling where
    `spelled` (else `uploads.local_path` says it)."""
    if outside:
        if "\x00" in name:
            raise UploadRefused(Problem(field, f"{name!r} holds a NUL character", "name it without one"))
        return Path(os.path.normpath(Path(os.path.abspath(root)) / name))
    try:
        path = uploads.local_path(name, root, field)
    except UploadRefused as refused:
        if not spelled or "\x00" in name:
            raise
        shown = Path(os.path.abspath(root))
        raise UploadRefused(
            Problem(field, f"{name} is outside the job file's folder {shown}", fix.replace("{root}", str(shown)))
        ) from refused
    real_root, real = Path(os.path.realpath(root)), Path(os.path.realpath(path))
    if not _under(real_root, real):
        raise UploadRefused(
            Problem(
                field,
                f"{name} is a link to {real}, outside the job file's folder {real_root}; crosstrain uploads only what "
                "lies under it",
                fix.replace("{root}", str(real_root)),
            )
        )
    return path


def _read(
    path: Path,
    *,
    field: str,
    noun: str,
    ignore_files: Sequence[str],
    limits: Limits | None,
    job_file: Path | None,
    git_rules: bool = True,
    files: bool = False,
) -> Folder:
    """What the folder (or, with `files`, the regular file) at `path` holds to upload, named by its real path."""
    try:
        mode: int | None = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as exc:
        raise ignores.unreadable(str(path), field, exc) from None
    is_dir = mode is not None and stat.S_ISDIR(mode)
    is_file = files and mode is not None and stat.S_ISREG(mode)
    if not is_dir and not is_file:
        what = "does not exist" if mode is None else ("is not a file or folder" if files else "is not a folder")
        which = f"the {noun}" if files else f"the {noun}'s folder"
        raise UploadRefused(Problem(field, f"{path} {what}", f"name {which}, relative to the job file"))
    path = Path(os.path.realpath(path))  # named by where it is (a link's name is not what is uploaded)
    _check_name(str(path), None, field)
    limits = limits or Limits()
    sources: set[str] = set()
    entered: list[str] = []
    the_job_file = _file_id(job_file)
    if is_file:
        info = os.stat(path)
        if (info.st_dev, info.st_ino) == the_job_file:
            raise UploadRefused(
                Problem(field, f"{path} is the job file, which crosstrain never uploads", f"name another {noun}")
            )
        listing = [(path.name, str(path), info)]
        left_out = ""
    else:
        rules = ignores.for_folder(path, ignore_files) if git_rules else ignores.own_rules(path, ignore_files)
        listing = list(_walk(path, limits, rules, sources, field=field, noun=noun, dirs=entered))
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
        git_rules,
        tuple(sorted(sources)),
        left_out,
        tuple(sorted(entered)),
        tuple((rel, info.st_size, info.st_mtime_ns, info.st_ino, info.st_mode) for rel, _, info in listing),
    )
    cached = _FOLDERS.get(key)
    if cached is not None:
        return cached
    hashed = tuple(sorted((_hashed(rel, p, info, prefix="", field=field) for rel, p, info in listing), key=_by_path))
    dirs = tuple(sorted(entered))
    digest = hashlib.sha256(b"file\n" if is_file else b"")  # a file and a folder holding it are not the same upload
    for file in hashed:
        digest.update(f"{file.path}\0{int(file.executable)}\0{file.size}\0{file.sha256}\n".encode())
    for rel in dirs:
        digest.update(f"{rel}/\n".encode())
    made = Folder(
        path,
        hashed,
        dirs,
        tuple(sorted(sources)),
        tuple(ignore_files),
        digest.hexdigest(),
        field,
        left_out,
        is_file,
        git_rules,
    )
    for cache in (_FOLDERS, _MADE_FOLDERS):
        if len(cache) > 16:
            cache.clear()
    _FOLDERS[key] = made
    _MADE_FOLDERS[made.digest] = made
    return made


def check_folder_unchanged(
    ref: CodeRef, *, field: str, noun: str, limits: Limits | None = None, data: bool = False
) -> Folder:
    """The folder a request was rendered with, listed again; refused if it changed since. `data`: a file or folder
    read as `local_data` reads it."""
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
    if data:
        made = local_data(
            where.name,
            where.parent,
            field=field,
            noun=noun,
            ignore_files=ref.ignore_files,
            limits=limits,
            job_file=job_file,
        )
    else:
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
