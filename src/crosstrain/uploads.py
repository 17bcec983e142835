"""What a backend may read from this machine to upload, and where on the platform it may write it.

A render that uploads a local file prints it (base64) in the request and submit copies it to a place other
users may read, so only what the user meant is read:

* **only files under the job's folder** (the folder crosstrain runs from, against which the command's paths
  are resolved): a path that leaves it, by `..` or by being absolute, is refused;
* **no symlink out of it**: a link inside the folder to `~/.aws/credentials` is refused, naming the link and
  where it points; a link to another file inside the folder is read as that file;
* **regular files only**, opened without following a last-moment link and without blocking (a FIFO, a device
  or a directory is refused), and **at most `limit + 1` bytes are read**, so a size limit is checked before
  anything is sent and a huge or endless file costs no more than the limit;
* **no traversal in a destination path** (`..` or `.` parts, `//`, NUL or other control characters; a folder
  must be absolute, a name relative), so a setting or a file name can never point an upload elsewhere.

Errors are `UploadRefused`, which carries one `Problem` (field path, what is wrong, the fix). The code-shipping
work reuses these rules for whole folders: `read_file` per file, `check_destination` per name.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from crosstrain import reads
from crosstrain.errors import Problem, SpecError
from crosstrain.frozen import frozen


class UploadRefused(SpecError):
    """A file that must not be read for upload, or a destination path that must not be written (exit 2)."""

    headline = "refused to upload"

    def __init__(self, problem: Problem, *, headline: str | None = None) -> None:
        super().__init__([problem], headline=headline)
        self.problem = problem


@frozen
class SizeLimit:
    """The most bytes of a file a platform takes in one upload, and how to say so."""

    max_bytes: int
    #: Says what limits it and where that is documented, e.g. "the Databricks workspace import takes ...".
    description: str
    #: What to do with a larger file.
    fix: str

    @classmethod
    def base64(cls, max_encoded: int, description: str, fix: str) -> SizeLimit:
        """A limit on the base64 text of the file: base64 writes 4 characters for every 3 bytes."""
        return cls(max_encoded // 4 * 3, description, fix)


def _contains(folder: Path, path: Path) -> bool:
    return path == folder or folder in path.parents


def local_path(name: str, root: Path, field: str) -> Path:
    """`name` (as written in the job) resolved against `root`, refused if it leaves `root` by its spelling
    (`..`, an absolute path elsewhere) or holds a NUL. Symlinks are not followed here: `read_file` does."""
    root = Path(os.path.abspath(root))
    if "\x00" in name:
        raise UploadRefused(Problem(field, f"{name!r} holds a NUL character", "name the file without it"))
    path = Path(os.path.normpath(root / name))  # an absolute name replaces root
    if not _contains(root, path):
        raise UploadRefused(
            Problem(
                field,
                f"{name} is outside the job's folder {root}; only files under it are uploaded",
                f"copy the file under {root}, or run crosstrain from a folder that holds it",
            )
        )
    return path


def read_file(name: str, root: Path, field: str, limit: SizeLimit) -> bytes:
    """The bytes of the regular file `name` under `root`, at most `limit.max_bytes` of them, or `UploadRefused`."""
    reads.read(None)  # a render that reads a file as it is (a requirements file) is not remembered
    path = local_path(name, root, field)
    real_root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(path))
    if not _contains(real_root, real):
        link = _first_link(Path(os.path.abspath(root)), path)
        raise UploadRefused(
            Problem(
                field,
                f"{link} is a symlink to {os.readlink(link) if link else real}, which leaves the job's folder "
                f"{real_root}; crosstrain does not upload files outside it",
                f"copy the file you mean into {real_root} in place of the link, or name the file itself",
            )
        )
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        raise UploadRefused(
            Problem(field, f"cannot read {name}: {exc.strerror}", "check that the file exists and is readable")
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UploadRefused(
                Problem(field, f"{name} is not a regular file", "name a regular file; only those are uploaded")
            )
        chunks: list[bytes] = []
        left = 0 if info.st_size > limit.max_bytes else limit.max_bytes + 1  # a file may grow while read
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    size = max(info.st_size, len(data))
    if size > limit.max_bytes:
        more = "more than " if len(data) > limit.max_bytes and info.st_size <= limit.max_bytes else ""
        raise UploadRefused(
            Problem(
                field,
                f"{name} is {more}{size:,} bytes; {limit.description}, so at most {limit.max_bytes:,} bytes",
                limit.fix,
            )
        )
    return data


def _first_link(root: Path, path: Path) -> Path | None:
    """The first symlink on the way from `root` down to `path` (both absolute and normalised)."""
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            return current
    return None


_FIX_PART = "use a path of plain names separated by single '/', without '.' or '..' parts"


def check_destination(path: str, field: str, *, absolute: bool) -> str:
    """`path` if it is a safe place to write on a platform: a folder (`absolute=True`, e.g. a workspace folder)
    or a name under one (`absolute=False`); else `UploadRefused` naming `field`."""

    def refuse(what: str, fix: str = _FIX_PART) -> UploadRefused:
        return UploadRefused(Problem(field, f"{path!r} {what}", fix))

    if not path:
        raise refuse("is empty", "give a path")
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise refuse("holds a NUL or another control character", "remove it")
    if "\\" in path:
        raise refuse("holds a backslash", "separate folders with '/'")
    if absolute and not path.startswith("/"):
        raise refuse("is not an absolute path", "start it with '/'")
    if not absolute and path.startswith("/"):
        raise refuse("is an absolute path where a name under the upload folder belongs", "give a relative name")
    body = path[1:] if absolute else path
    parts = body.split("/")
    if "" in parts:
        raise refuse("holds an empty part ('//' or a trailing '/')")
    if any(part in (".", "..") for part in parts):
        raise refuse("holds a '.' or '..' part, which would point the upload elsewhere")
    return path


def join_destination(folder: str, name: str, field: str) -> str:
    """`folder/name`, both checked: the one place a backend builds an upload's destination."""
    folder = check_destination(folder.rstrip("/"), field, absolute=True)
    return f"{folder}/{check_destination(name, field, absolute=False)}"
