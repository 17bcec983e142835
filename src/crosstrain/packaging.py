"""The job's code, as it travels: one deterministic, content-addressed bundle of a local folder.

A job with `code: ./src` ships that folder (less what git ignores there and what `.crosstrainignore` leaves
out: `crosstrain.ignores`, and less the job file where it lies there: the request carries what it says) and
crosstrain's own runtime (standard library and torch only), so a stock PyTorch
image with no crosstrain installed runs it. Every target receives the same layout:

    crosstrain_code/__init__.py      empty: the folder is a package, so pip can install it
    crosstrain_code/__main__.py      the bootstrap (`crosstrain.bootstrap`): `python -m crosstrain_code -- CMD`
    crosstrain_code/requirements.txt the job's requirements, installed by the bootstrap where asked
    crosstrain_code/crosstrain/...   crosstrain's runtime (launch, runtime, databricks_task)
    crosstrain_code/src/...          the user's files: the command's working folder

either unpacked (Azure ML code assets, Databricks workspace files, the local target's staging folder) or as
one sdist, `crosstrain_code-1.0.tar.gz`, which is also what pip installs on Google's pre-built containers.

The digest (sha256 over every path, mode, size and content, and the requirements) names the bundle: same
files give the same digest and the same archive bytes, whatever the mtimes, the listing order or the umask.
It is part of every upload's destination, so it is part of the request's fingerprint and identity, and an
unchanged folder is found where it was uploaded before (nothing is sent again).

Reading follows `crosstrain.uploads`: the folder must be under the job file's folder unless the job says
otherwise (`code: {path: ..., outside_job_folder: true}`), only files under it, no symlink that leaves it,
regular files with UTF-8 names only, and the file count and total size are bounded before anything is read in
full. What goes into an archive is exactly what was hashed: a file's bytes are checked against its digest as
they are written, so the digest that names an upload always names its bytes.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import errno
import functools
import hashlib
import io
import os
import stat
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from crosstrain import ignores, reads
from crosstrain.errors import Problem, SubmitError
from crosstrain.frozen import frozen
from crosstrain.uploads import UploadRefused

PACKAGE = "crosstrain_code"
VERSION = "1.0"
ARCHIVE_NAME = f"{PACKAGE}-{VERSION}.tar.gz"


def counted(n: int, word: str, plural: str = "") -> str:
    """`n` and `word`, plural where `n` is not one ("1 file", "2 files"; "2 processes" given the plural)."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {plural or word + 's'}"


#: The user's files, under the package: the folder the command runs in.
SOURCE_DIR = "src"
#: Where the user's files go in the bundle.
USER_PREFIX = f"{PACKAGE}/{SOURCE_DIR}/"
#: The ignore files read at the folder's root after git's rules (`crosstrain.ignores`), the last one last.
IGNORE_FILES: tuple[str, ...] = (".crosstrainignore",)
#: Every archive member's mtime: 2000-01-01, after the 1980 floor of the zip files pip builds from an sdist.
ARCHIVE_MTIME = 946684800
#: crosstrain's files that run on the nodes, relative to the package: what a node runs (the launcher, the
#: Databricks task, a shipped function's runner), what a job imports (`crosstrain.runtime`), every crosstrain
#: module those import and each package's `__init__.py` on the way; besides those, they import only the standard
#: library and torch. A list, not a walk of their imports on every render: a test holds it to their imports.
NODE_SIDE_FILES: tuple[str, ...] = (
    "__init__.py",
    "databricks_task.py",
    "errors.py",
    "function.py",
    "launch.py",
    "safe.py",
    "secrets.py",
    "runtime/__init__.py",
    "runtime/dist.py",
    "runtime/env.py",
    "runtime/join.py",
    "runtime/secrets.py",
    "runtime/sweep.py",
    "runtime/platforms/__init__.py",
    "runtime/platforms/aiplatform.py",
    "runtime/platforms/azureml.py",
    "runtime/platforms/azureml_mpi.py",
    "runtime/platforms/base.py",
    "runtime/platforms/databricks.py",
    "runtime/platforms/databricks_air.py",
    "runtime/platforms/plain.py",
    "runtime/platforms/single.py",
    "runtime/platforms/torchelastic.py",
    "runtime/platforms/vertex.py",
)


@frozen
class Limits:
    """The most a bundle may hold; a folder with more is refused before it is read in full."""

    max_files: int = 100_000
    max_bytes: int = 2 * 1024**3
    #: Says what sets the byte limit, e.g. "a Databricks workspace import takes at most 10 MB".
    description: str = "crosstrain ships at most 2 GiB of code"
    fix: str = "leave data, checkpoints and environments out of the folder (list them in .crosstrainignore)"


def _packaged(field: str) -> str:
    """What a refusal at `field` calls what was being packaged: the code, or a folder uploaded as it is."""
    return "code" if field == "code" else "folder"


@frozen
class CodeFile:
    """One file of the bundle: where it goes, where it comes from, and what it holds."""

    path: str  # relative to the bundle root, '/'-separated
    size: int
    sha256: str
    executable: bool = False
    source: Path | None = None  # a file on this machine, or None for generated content
    content: bytes | None = None
    #: The source's (size, mtime in ns) when it was hashed: `check_unchanged` refuses a file changed since.
    stamp: tuple[int, int] | None = None
    #: Its deflated size as estimated from the bytes that were hashed (`Bundle.compression`).
    deflated: float = 0.0
    #: The job field a refusal to read it names: `code`, or the setting of a folder uploaded as it is (`Folder`).
    field: str = "code"

    def read(self) -> bytes:
        """The file's bytes, exactly those its digest names: a file rewritten since it was hashed (even in
        place, at the same size and mtime) is refused rather than shipped under a digest it does not match."""
        if self.content is not None:
            return self.content
        assert self.source is not None
        try:
            data = self.source.read_bytes()
        except OSError as exc:
            where = f"{self.field}: {self.path.removeprefix(USER_PREFIX)}"
            raise ignores.unreadable(str(self.source), where, exc) from None
        if len(data) != self.size or hashlib.sha256(data).hexdigest() != self.sha256:
            raise UploadRefused(
                Problem(
                    self.field,
                    f"{self.source} changed while the {_packaged(self.field)} was packaged (its bytes no longer match "
                    "the digest that names the upload)",
                    "submit again once the folder is stable (e.g. when training outputs are no longer written into it)",
                )
            )
        return data


@frozen
class CodeRef:
    """What a rendered request ships: the folder on this machine and its digest at render time. Kept in the
    request (not in its fingerprint), so `send` packages the same folder again and refuses if it changed."""

    folder: str
    digest: str
    files: int
    bytes: int
    ignore_files: tuple[str, ...] = IGNORE_FILES
    requirements: tuple[str, ...] = ()
    #: sha256 of a shipped function's pickle (`crosstrain.function`), kept in this process only.
    function: str = ""
    #: The job file, relative to the folder, where it lies there: never shipped (`Bundle.job_file`).
    job_file: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["ignore_files"] = list(self.ignore_files)
        data["requirements"] = list(self.requirements)
        return data

    @classmethod
    def from_dict(cls, data: Any) -> CodeRef:
        return cls(
            folder=str(data["folder"]),
            digest=str(data["digest"]),
            files=int(data["files"]),
            bytes=int(data["bytes"]),
            ignore_files=tuple(data.get("ignore_files") or IGNORE_FILES),
            requirements=tuple(data.get("requirements") or ()),
            function=str(data.get("function") or ""),
            job_file=str(data.get("job_file") or ""),
        )


@frozen
class Bundle:
    """A folder's files and crosstrain's runtime, in the bundle's layout, with their digest."""

    folder: Path | None
    user_files: tuple[CodeFile, ...]
    requirements: tuple[str, ...]
    #: The ignore files that left something out, as the folder sees them (`../.gitignore`).
    ignore_sources: tuple[str, ...]
    ignore_files: tuple[str, ...]
    files: tuple[CodeFile, ...]  # every file of the layout, sorted by path
    digest: str
    function: str = ""
    #: The job file, relative to the folder, where it lies there: left out, since the request already carries
    #: what it says, and shipped it would make an edit of any target's settings move every target's identity.
    job_file: str = ""

    @functools.cached_property
    def size(self) -> int:
        return sum(f.size for f in self.user_files)

    @property
    def ref(self) -> CodeRef:
        return CodeRef(
            str(self.folder or ""),
            self.digest,
            len(self.user_files),
            self.size,
            self.ignore_files,
            self.requirements,
            self.function,
            self.job_file,
        )

    @property
    def short(self) -> str:
        """The digest as destinations spell it: 32 hex characters."""
        return self.digest[:32]

    def describe(self) -> str:
        leave = "leaves" if len(self.ignore_sources) == 1 else "leave"
        less = [f"the job file {self.job_file}"] if self.job_file else []
        less += [f"what {' and '.join(self.ignore_sources)} {leave} out"] if self.ignore_sources else []
        ignored = f", less {' and '.join(less)}" if less else ""
        function = " and a function" if self.function else ""
        files = counted(len(self.user_files), "file")
        where = f"{self.folder}: {files}, {self.size:,} bytes{ignored}" if self.folder else ""
        return f"{where or 'no folder'}{function} (sha256 {self.short})"

    def write_archive(self, out: IO[bytes]) -> None:
        """The sdist: the same bytes for the same files (fixed mtimes, owners and modes, sorted members). Each
        file's bytes are those its digest names (`CodeFile.read`)."""
        import gzip  # here, with tarfile: a render writes no archive, and they cost a cold one 5 ms
        import tarfile

        with (
            writing(_where(out)),
            gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=self.compression()) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            for file in self._members():
                info = tarfile.TarInfo(f"{PACKAGE}-{VERSION}/{file.path}")
                info.size, info.mtime = file.size, ARCHIVE_MTIME
                info.mode = 0o755 if file.executable else 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(file.read()))

    def _members(self) -> list[CodeFile]:
        members = [*self.files, _generated("PKG-INFO", _pkg_info()), _generated("setup.py", self._setup_py())]
        return sorted(members, key=_by_path)

    def compression(self) -> int:
        """The gzip level: 1 where the archive compresses (source code does, ~4x; so do many small files, whose
        tar headers and padding are most of the archive), 0 (stored) where it is mostly data that does not
        (weights, archives, images), where deflating costs 5x the time of the whole archive for a few percent.
        Decided from a 4 KiB sample of each file, read as it was hashed: the same files give the same level."""
        members = self._members()
        stored = sum(TAR_BLOCK + -(-f.size // TAR_BLOCK) * TAR_BLOCK for f in members) + 2 * TAR_BLOCK
        deflated = sum(f.deflated + DEFLATED_HEADER for f in members)
        return 1 if deflated < 0.8 * stored else 0

    def archive(self) -> bytes:
        buffer = io.BytesIO()
        self.write_archive(buffer)
        return buffer.getvalue()

    def stage(self, dest: Path) -> Path:
        """The bundle unpacked under `dest` (as Azure ML and Databricks receive it); returns the package folder."""
        with writing(str(dest)):
            for file in self.files:
                path = dest / file.path
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(file.read())
                if file.executable:
                    path.chmod(0o755)
        return dest / PACKAGE

    def _setup_py(self) -> bytes:
        import glob  # an archive's setup.py only: not on a render's path

        inside = [glob.escape(f.path.removeprefix(f"{PACKAGE}/")) for f in self.files]
        data = [p for p in inside if p not in ("__init__.py",)]
        return (
            "# Generated by crosstrain: installs the job's code and crosstrain's runtime as one package.\n"
            "from setuptools import setup\n\n"
            f"setup(\n    name={PACKAGE!r},\n    version={VERSION!r},\n    packages=[{PACKAGE!r}],\n"
            f"    package_data={{{PACKAGE!r}: {data!r}}},\n"
            f"    install_requires={list(self.requirements)!r},\n    zip_safe=False,\n)\n"
        ).encode()


#: The bytes of each file `Bundle.compression` looks at.
SAMPLE = 4096
#: A tar member's header, and the unit its data is padded to.
TAR_BLOCK = 512
#: What a member's header and padding deflate to, at most, at level 1 (measured: 8 to 26 bytes each among
#: thousands of small files).
DEFLATED_HEADER = 64


def _deflated(size: int, head: bytes) -> float:
    """A file's deflated size at gzip -1, estimated from its first bytes."""
    return size * min(1.0, len(zlib.compress(head, 1)) / len(head)) if head else 0.0


def _generated(path: str, content: bytes) -> CodeFile:
    digest = hashlib.sha256(content).hexdigest()
    return CodeFile(path, len(content), digest, content=content, deflated=_deflated(len(content), content[:SAMPLE]))


def _where(out: IO[bytes]) -> str:
    """Where `out` writes, as a message names it: its path, or the temporary folder of a nameless file."""
    import tempfile

    name = getattr(out, "name", None)
    return name if isinstance(name, str) else f"a temporary file in {tempfile.gettempdir()}"


@contextlib.contextmanager
def writing(where: str) -> Iterator[None]:
    """An OS error while the bundle is written (a full disk, a read-only folder) as a `SubmitError` that says
    where and what to do, rather than a bare `No space left on device`."""
    try:
        yield
    except OSError as exc:
        fix = {
            errno.ENOSPC: "free space there, or point TMPDIR at a folder on a disk with room",
            errno.EDQUOT: "free space there (the disk quota is used up), or point TMPDIR elsewhere",
            errno.EROFS: "point TMPDIR at a writable folder",
        }.get(exc.errno or 0, "check that the folder exists and is writable, or point TMPDIR elsewhere")
        raise SubmitError(f"cannot write the code bundle to {where}: {exc.strerror or exc}. To fix: {fix}") from None


def _pkg_info() -> bytes:
    return f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n".encode()


#: crosstrain's node-side files as last read, by the (size, mtime, inode) of each: read and hashed once per process.
_RUNTIME: dict[tuple[tuple[int, int, int], ...], tuple[CodeFile, ...]] = {}


def runtime_files() -> tuple[CodeFile, ...]:
    """crosstrain's own files that run on the nodes, read from this installation; read again only where one
    of them changed (its size, mtime or inode), so a render costs a stat per file."""
    stamps = []
    for path in _runtime_paths():
        info = os.stat(path)
        stamps.append((info.st_size, info.st_mtime_ns, info.st_ino))
    key = tuple(stamps)
    cached = _RUNTIME.get(key)
    if cached is None:
        _RUNTIME.clear()
        cached = _RUNTIME[key] = _read_runtime_files(Path(__file__).parent)
    return cached


@functools.cache
def _runtime_paths() -> tuple[str, ...]:
    here = os.path.dirname(os.path.abspath(__file__))
    return tuple(os.path.join(here, name) for name in (*NODE_SIDE_FILES, "bootstrap.py"))


def _read_runtime_files(here: Path) -> tuple[CodeFile, ...]:
    files = []
    for name in NODE_SIDE_FILES:
        data = (here / name).read_bytes()
        files.append(_generated(f"{PACKAGE}/crosstrain/{name}", data))
    bootstrap = (here / "bootstrap.py").read_bytes()
    files.append(_generated(f"{PACKAGE}/__main__.py", bootstrap))
    files.append(_generated(f"{PACKAGE}/__init__.py", b""))
    return tuple(files)


def _walk(
    folder: Path,
    limits: Limits,
    rules: ignores.Ignores,
    sources: set[str],
    *,
    field: str = "code",
    noun: str = "code folder",
    dirs: list[str] | None = None,
) -> Iterator[tuple[str, str, os.stat_result]]:
    """Every file to ship under `folder`: (relative path, path, its stat), links inside the folder followed and
    folders that the ignore rules leave out not entered; `sources` gets the ignore files that left something
    out, and `dirs` (where given) the relative path of every folder entered, empty ones too. Refusals name
    `field` and call the folder `noun`. Plain strings and `os.scandir`'s cached stats: a 10,000-file folder is
    listed in a few tens of ms."""
    real_root = os.path.realpath(folder)
    inside = real_root.rstrip(os.sep) + os.sep
    seen_dirs = {real_root}
    stack: list[tuple[str, str, ignores.Ignores]] = [("", str(folder), rules)]
    count = 0
    while stack:
        prefix, current, here = stack.pop()
        ignores.note(current)  # a folder's mtime moves when an entry is added, removed or renamed in it
        try:
            entries = sorted(os.scandir(current), key=lambda e: e.name)
        except OSError as exc:
            raise ignores.unreadable(current, f"{field}: {prefix or '.'}", exc) from None
        for entry in entries:
            rel = f"{prefix}{entry.name}"
            try:
                is_dir = entry.is_dir(follow_symlinks=True)
            except OSError:
                is_dir = False
            source = here.leaves_out(rel, is_dir)
            if source is not None:
                if source != ignores.ALWAYS_IGNORED:
                    sources.add(source)
                continue
            if entry.is_symlink():
                real = os.path.realpath(entry.path)
                if real != real_root and not real.startswith(inside):
                    raise UploadRefused(
                        Problem(
                            f"{field}: {rel}",
                            f"{entry.path} is a symlink to {os.readlink(entry.path)}, which leaves the {noun} {folder}",
                            "copy what it points to into the folder, or list the link in .crosstrainignore",
                        )
                    )
                if is_dir and real in seen_dirs:
                    raise UploadRefused(
                        Problem(
                            f"{field}: {rel}", f"{entry.path} links back to a folder above it", "remove the link loop"
                        )
                    )
                if is_dir:
                    seen_dirs.add(real)
            if is_dir:
                if dirs is not None:
                    dirs.append(rel)
                stack.append((f"{rel}/", entry.path, here.entering(entry.path, f"{rel}/")))
                continue
            try:
                info = entry.stat(follow_symlinks=True)
            except OSError as exc:
                raise ignores.unreadable(entry.path, f"{field}: {rel}", exc) from None
            if not stat.S_ISREG(info.st_mode):
                raise UploadRefused(
                    Problem(
                        f"{field}: {rel}",
                        f"{entry.path} is not a regular file (a pipe, socket or device)",
                        "list it in .crosstrainignore",
                    )
                )
            _check_name(rel, folder, field)
            count += 1
            if count > limits.max_files:
                raise UploadRefused(
                    Problem(
                        field,
                        f"{folder} holds more than {limits.max_files:,} files to ship",
                        limits.fix,
                    )
                )
            yield rel, entry.path, info


def _check_name(name: str, folder: Path | None, field: str = "code") -> None:
    """Refuses a name that is not UTF-8 (a file's, relative to `folder`; or the folder's own, without one): the
    archive, the digest and every platform's upload spell names in UTF-8, so it could not be shipped as named."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(name).decode("utf-8", "backslashreplace")
        what = f"the file name {shown} in {folder}" if folder is not None else f"the folder name {shown}"
        raise UploadRefused(
            Problem(
                f"{field}: {shown}" if folder is not None else field,
                f"{what} is not UTF-8 (the bytes shown as \\xNN), which the archive and the platforms cannot carry",
                "rename it with a UTF-8 name"
                + (
                    ", or leave it out with a pattern in .crosstrainignore (e.g. one with a * where those bytes are)"
                    if folder is not None
                    else ""
                ),
            )
        ) from None


_CACHE: dict[tuple[Any, ...], Bundle] = {}
#: The bundles this process made, by digest: `send` after a render uses the render's (each file's bytes are
#: checked against its digest when read, so what is uploaded is what was hashed, or nothing).
_MADE: dict[str, Bundle] = {}
#: Within one render (`rendering()`), a folder is listed once: the probe render and the real one ship the same.
_SCOPE: contextvars.ContextVar[dict[tuple[Any, ...], Bundle] | None] = contextvars.ContextVar("scope", default=None)


@contextlib.contextmanager
def rendering() -> Iterator[None]:
    """A render's scope: every `bundle()` of the same folder inside it is the first one."""
    token = _SCOPE.set({})
    try:
        yield
    finally:
        _SCOPE.reset(token)


_FUNCTIONS: dict[str, bytes] = {}


def function_files(payload: bytes) -> tuple[CodeFile, ...]:
    """A pickled `(fn, args, kwargs)` and cloudpickle itself, which loads it on nodes that lack it."""
    try:
        import cloudpickle
    except ImportError:
        from crosstrain.errors import MissingDependency

        raise MissingDependency("shipping a function needs cloudpickle: pip install cloudpickle") from None
    here = Path(cloudpickle.__file__).parent
    files = [_generated(f"{PACKAGE}/function.pkl", payload)]
    for path in sorted(here.glob("*.py")):
        files.append(_generated(f"{PACKAGE}/cloudpickle/{path.name}", path.read_bytes()))
    return tuple(files)


def bundle(
    folder: Path | None,
    requirements: Sequence[str] = (),
    *,
    ignore_files: Sequence[str] = IGNORE_FILES,
    limits: Limits | None = None,
    function: bytes | None = None,
    job_file: Path | None = None,
) -> Bundle:
    """The bundle of `folder` and/or a pickled function (refused with `UploadRefused` when it cannot be
    shipped), less `job_file` (the file the job was loaded from) where it lies in the folder. Files are hashed
    once per (size, mtime, inode): rendering twice, or re-submitting an unchanged folder, reads nothing again."""
    scope = _SCOPE.get()
    scoped_key = (str(folder), tuple(requirements), tuple(ignore_files), function, str(job_file))
    if scope is not None and scoped_key in scope:  # listed under other limits: held to these ones
        made = scope[scoped_key]
        _check_limits(made, limits or Limits())
        return made
    try:
        made = _bundle(
            folder, requirements, ignore_files=ignore_files, limits=limits, function=function, job_file=job_file
        )
    except BaseException:
        reads.read(None)
        raise
    if scope is not None:
        scope[scoped_key] = made
    return made


def _check_limits(made: Bundle, limits: Limits) -> None:
    """`_bundle`'s refusals of a folder over `limits`, of a bundle listed under others: files first, then bytes."""
    if made.folder is None:
        return
    if len(made.user_files) > limits.max_files:
        raise UploadRefused(
            Problem("code", f"{made.folder} holds more than {limits.max_files:,} files to ship", limits.fix)
        )
    if made.size > limits.max_bytes:
        raise UploadRefused(
            Problem("code", f"{made.folder} holds {made.size:,} bytes to ship; {limits.description}", limits.fix)
        )


def _bundle(
    folder: Path | None,
    requirements: Sequence[str],
    *,
    ignore_files: Sequence[str],
    limits: Limits | None,
    function: bytes | None,
    job_file: Path | None,
) -> Bundle:
    extra = function_files(function) if function is not None else ()
    function_digest = hashlib.sha256(function).hexdigest() if function is not None else ""
    if function is not None:
        _FUNCTIONS[function_digest] = function
    if folder is None:  # besides its arguments, it reads crosstrain's own files (and cloudpickle's, for a function)
        runtime = runtime_files()
        reads.read((lambda: reads.once(runtime_files) is runtime) if function is None else None)
        return _assemble(None, (), requirements, (), ignore_files, extra, function_digest)
    where = (os.path.abspath(folder), os.path.abspath(job_file) if job_file is not None else None)
    replay_key = (*where, tuple(requirements), tuple(ignore_files), function_digest, limits)
    replayed = _replayed(replay_key)
    if replayed is not None:
        reads.read(lambda: _replayed(replay_key) is replayed)
        return replayed
    started = time.time_ns()
    with ignores.recording() as consulted:
        made = _listed(folder, requirements, ignore_files, limits, extra, function_digest, job_file)
    paths = [*consulted, *(f.source for f in made.user_files), *([where[1]] if where[1] is not None else [])]
    stamps = tuple((str(path), ignores.stamp(str(path))) for path in paths)
    if not any(stamp is not None and stamp[-1] >= started - RACY_NS for _, stamp in stamps):
        if len(_LISTED) > 16:
            _LISTED.clear()
        _LISTED[replay_key] = (stamps, made, runtime_files())
    reads.read((lambda: _replayed(replay_key) is made) if replay_key in _LISTED else None)  # else racy: unheld
    return made


#: Bundles of folders listed before in this process, with the (l)stat of every path their listing read or looked
#: for (the folders walked, the ignore files and `.git`, each file shipped, the job file): while none of those
#: moved, listing again would give the same bundle, so a render costs a stat per path instead of a listing.
_LISTED: dict[tuple[Any, ...], tuple[tuple[tuple[str, tuple[int, ...] | None], ...], Bundle, tuple[CodeFile, ...]]] = {}
#: A path changed this close (ns) before its listing started is not trusted to be unchanged while its stat is:
#: file times tick coarsely (a few ms), so a change in the same tick would keep the stat (git's "racy" files).
RACY_NS = 1_000_000_000


def _replayed(key: tuple[Any, ...]) -> Bundle | None:
    """The bundle listed under `key` before, while nothing it read (nor crosstrain's own files) has moved."""
    entry = _LISTED.get(key)
    if entry is None:
        return None
    stamps, made, runtime = entry
    if reads.once(runtime_files) is not runtime or any(reads.once(ignores.stamp, p) != s for p, s in stamps):
        del _LISTED[key]
        return None
    _MADE.setdefault(made.digest, made)
    return made


def _listed(
    folder: Path,
    requirements: Sequence[str],
    ignore_files: Sequence[str],
    limits: Limits | None,
    extra: tuple[CodeFile, ...],
    function_digest: str,
    job_file: Path | None,
) -> Bundle:
    limits = limits or Limits()
    folder = Path(os.path.abspath(folder))
    try:
        is_dir = stat.S_ISDIR(os.stat(folder).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        is_dir = False
    except OSError as exc:
        raise ignores.unreadable(str(folder), "code", exc) from None
    if not is_dir:
        what = "does not exist" if not folder.exists() else "is not a folder"
        raise UploadRefused(
            Problem("code", f"{folder} {what}", "name a folder relative to the job file, e.g. code: ./src")
        )
    _check_name(str(folder), None)
    sources: set[str] = set()
    listing = list(_walk(folder, limits, ignores.for_folder(folder, ignore_files), sources))
    the_job_file = _file_id(job_file)
    left_out = next((rel for rel, _, info in listing if (info.st_dev, info.st_ino) == the_job_file), "")
    if left_out:  # by what it is, not its name: a link to it, or a hard link, is the job file too
        listing = [item for item in listing if (item[2].st_dev, item[2].st_ino) != the_job_file]
    total = sum(info.st_size for _, _, info in listing)
    if total > limits.max_bytes:
        raise UploadRefused(
            Problem("code", f"{folder} holds {total:,} bytes to ship; {limits.description}", limits.fix)
        )
    if not listing:
        raise UploadRefused(Problem("code", f"{folder} holds no file to ship", "check the folder and its ignore file"))
    key = (
        str(folder),
        tuple(requirements),
        tuple(ignore_files),
        function_digest,
        tuple(sorted(sources)),
        left_out,
        tuple((rel, info.st_size, info.st_mtime_ns, info.st_ino, info.st_mode) for rel, _, info in listing),
    )
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    user = tuple(_hashed(rel, path, info) for rel, path, info in listing)
    made = _assemble(folder, user, requirements, tuple(sorted(sources)), ignore_files, extra, function_digest, left_out)
    if len(_CACHE) > 16:
        _CACHE.clear()
    _CACHE[key] = made
    if len(_MADE) > 16:
        _MADE.clear()
    _MADE[made.digest] = made
    return made


def _assemble(
    folder: Path | None,
    user: tuple[CodeFile, ...],
    requirements: Sequence[str],
    ignore_sources: tuple[str, ...],
    ignore_files: Sequence[str],
    extra: tuple[CodeFile, ...],
    function_digest: str,
    job_file: str = "",
) -> Bundle:
    reqs = "".join(f"{line}\n" for line in requirements).encode()
    generated = (*runtime_files(), *extra, _generated(f"{PACKAGE}/requirements.txt", reqs))
    files = tuple(sorted((*user, *generated), key=_by_path))
    digest = hashlib.sha256()
    for file in files:
        digest.update(f"{file.path}\0{int(file.executable)}\0{file.size}\0{file.sha256}\n".encode())
    return Bundle(
        folder,
        user,
        tuple(requirements),
        ignore_sources,
        tuple(ignore_files),
        files,
        digest.hexdigest(),
        function_digest,
        job_file,
    )


def _file_id(path: Path | None) -> tuple[int, int] | None:
    """The (device, inode) of the file at `path`; None without one."""
    try:
        info = os.stat(path) if path is not None else None
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if info is not None else None


def _by_path(file: CodeFile) -> str:
    return file.path


def _hashed(rel: str, path: str, info: os.stat_result, *, prefix: str = USER_PREFIX, field: str = "code") -> CodeFile:
    """The user's file at `path` (shipped as `prefix` + `rel`): its digest, and its deflated size from those bytes."""
    digest = hashlib.sha256()
    head = b""
    read = 0
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                head = head or chunk[:SAMPLE]
                digest.update(chunk)
                read += len(chunk)
    except OSError as exc:
        raise ignores.unreadable(path, f"{field}: {rel}", exc) from None
    if read != info.st_size:
        raise UploadRefused(
            Problem(
                field,
                f"{path} changed while the {_packaged(field)} was packaged",
                "submit again once the folder is stable",
            )
        )
    return CodeFile(
        f"{prefix}{rel}",
        info.st_size,
        digest.hexdigest(),
        bool(info.st_mode & stat.S_IXUSR),
        source=Path(path),
        stamp=(info.st_size, info.st_mtime_ns),
        deflated=_deflated(info.st_size, head),
        field=field,
    )


def for_job(job: Any, *, ignore_files: Sequence[str] = IGNORE_FILES, limits: Limits | None = None) -> Bundle | None:
    """The bundle of `job.code` and of a function shipped with the job (None without either), with the job's
    requirements, less the job file where it lies in the folder (`TrainingJob.job_file`)."""
    function = job.function_payload
    if job.code is None and function is None:
        return None
    return bundle(
        code_folder(job),
        requirements_of(job),
        ignore_files=ignore_files,
        limits=limits,
        function=function,
        job_file=job.job_file,
    )


def code_folder(job: Any) -> Path | None:
    """The folder `job.code` names, resolved against the job file's folder; refused where it lies outside that
    folder (by `..`, an absolute path or a symlink), as every other upload is, unless the job names it with
    `outside_job_folder: true`: a job file must not ship ~/.aws because it says `code: ../../.aws`."""
    from crosstrain.spec import CodeFolder

    code = job.code
    if code is None:
        return None
    name, outside = (code.path, code.outside_job_folder) if isinstance(code, CodeFolder) else (code, False)
    root = Path(os.path.abspath(job.base_dir))
    folder = Path(os.path.normpath(root / name))
    if outside:
        return folder
    real_root, real = Path(os.path.realpath(root)), Path(os.path.realpath(folder))
    if not _under(root, folder) or not _under(real_root, real):
        how = "" if not _under(root, folder) else f" through a symlink (it is {real})"
        raise UploadRefused(
            Problem(
                "code",
                f"{name} is outside the job file's folder {root}{how} (for a job made in Python, the current "
                "folder); crosstrain ships a folder from elsewhere only when the job says so",
                f"move the job file to a folder that holds the code, or name it as outside the job folder: "
                f"code: {{path: {name}, outside_job_folder: true}}",
            )
        )
    return folder


def _under(root: Path, path: Path) -> bool:
    return path == root or root in path.parents


#: The most a requirements file may hold.
REQUIREMENTS_LIMIT = 1 << 20


def requirements_of(job: Any) -> tuple[str, ...]:
    """The job's requirements as pip lines: the list, or the file's lines (comments and blanks left out), each
    held to the list's rule (`requirement_problem`) and refused at `requirements[FILE:LINE]`."""
    from crosstrain import uploads
    from crosstrain.spec import RequirementsFile, requirement_problem

    value = job.requirements
    if value is None:
        return ()
    if not isinstance(value, RequirementsFile):
        return tuple(value)
    limit = uploads.SizeLimit(REQUIREMENTS_LIMIT, "a requirements file is read up to 1 MiB", "shorten it")
    data = uploads.read_file(value.file, job.base_dir, "requirements", limit)
    lines = []
    for number, raw in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            problem = requirement_problem(line)
            if problem is not None:
                where = Problem(f"requirements[{value.file}:{number}]", *problem)
                raise UploadRefused(where, headline="invalid requirements file")
            lines.append(line)
    return tuple(lines)


def check_unchanged(ref: CodeRef, limits: Limits | None = None) -> Bundle:
    """The bundle a request was rendered with, packaged again; refused if the folder changed since."""
    function = _FUNCTIONS.get(ref.function) if ref.function else None
    if ref.function and function is None:
        raise UploadRefused(
            Problem(
                "code.function",
                "the request ships a function, which only the Python session that rendered it holds",
                "submit the function from that session: crosstrain.submit(fn, job, target)",
            )
        )
    rendered = _MADE.get(ref.digest)
    same = (str(rendered.folder or ""), rendered.ignore_files, rendered.job_file) if rendered is not None else None
    if rendered is not None and same == (ref.folder, ref.ignore_files, ref.job_file):
        for file in rendered.user_files:  # a stat per file, no listing and no hashing: what was hashed is there
            assert file.source is not None
            assert file.stamp is not None
            try:
                info = file.source.stat()
            except OSError:
                info = None
            if info is None or (info.st_size, info.st_mtime_ns) != file.stamp:
                raise UploadRefused(
                    Problem(
                        "code",
                        f"{ref.folder} changed since the request was rendered ({file.source} did)",
                        "render the request again",
                    )
                )
        return rendered
    folder = Path(ref.folder) if ref.folder else None
    job_file = folder / ref.job_file if folder is not None and ref.job_file else None
    made = bundle(
        folder, ref.requirements, ignore_files=ref.ignore_files, limits=limits, function=function, job_file=job_file
    )
    if made.digest != ref.digest:
        raise UploadRefused(
            Problem(
                "code",
                f"{ref.folder or 'the code'} changed since the request was rendered "
                f"(sha256 {ref.digest[:32]}, now {made.short})",
                "render the request again",
            )
        )
    return made
