"""A large code folder shipped as one archive: crosstrain_code/ as it is, the user's files as one member.

A platform that receives the bundle unpacked (Azure ML's code assets) takes one upload per file; for thousands
of files that is thousands of requests. Where the folder holds more files than a target's setting allows
(Azure ML's `code_archive_above`), the user's files (the bundle's `src/`) go into one archive beside the rest:

    crosstrain_code/__main__.py, __init__.py, requirements.txt, crosstrain/...   as in every bundle
    crosstrain_code/src.tar.gz                                                    the user's files

and the bootstrap (`crosstrain.bootstrap`) unpacks it into `crosstrain_code/src/` once per node before the
command runs, with the bundle's safe extraction (`crosstrain.databricks_task.extract`). The archive is the
packaging's own sdist (`packaging.Bundle.write_archive`) of the user's files alone: the same files give the same
bytes, so the archive's digest, and the content hash of everything shipped, are content-addressed as before.
"""

from __future__ import annotations

import dataclasses
import hashlib

from crosstrain import packaging

#: The archive's name in the package folder; the bootstrap looks for it there (`bootstrap.ARCHIVED`).
ARCHIVED = "src.tar.gz"
#: Its path in the bundle.
ARCHIVE_PATH = f"{packaging.PACKAGE}/{ARCHIVED}"
#: Where the user's files lie inside it (the sdist's top folder, then the bundle's own layout).
INSIDE = f"{packaging.PACKAGE}-{packaging.VERSION}/{packaging.USER_PREFIX}"


def archives(bundle: packaging.Bundle, above: int) -> bool:
    """Whether `bundle` goes as one archive: it holds more than `above` files of the user's."""
    return len(bundle.user_files) > above


def user_archive(bundle: packaging.Bundle) -> packaging.CodeFile:
    """The archive of the bundle's user files, as one generated file of the bundle: made once per content (the
    last one is kept, so a render and the submit that follows it build it once)."""
    key = tuple((f.path, f.size, f.sha256, f.executable) for f in bundle.user_files)
    cached = _LAST.get(key)
    if cached is not None:
        return cached
    alone = dataclasses.replace(bundle, files=bundle.user_files, requirements=())
    data = alone.archive()
    made = packaging.CodeFile(ARCHIVE_PATH, len(data), hashlib.sha256(data).hexdigest(), content=data)
    _LAST.clear()
    _LAST[key] = made
    return made


_LAST: dict[tuple[tuple[str, int, str, bool], ...], packaging.CodeFile] = {}


def shipped(bundle: packaging.Bundle, archived: bool) -> tuple[packaging.CodeFile, ...]:
    """The files that go up: the bundle's own, or, archived, crosstrain_code/ less the user's files, and their
    archive, sorted by path as the bundle's are."""
    if not archived:
        return bundle.files
    users = {f.path for f in bundle.user_files}
    rest = [f for f in bundle.files if f.path not in users]
    return tuple(sorted([*rest, user_archive(bundle)], key=lambda f: f.path))


def note(bundle: packaging.Bundle, setting: str) -> str:
    """What a render says of an archived bundle."""
    files = packaging.counted(len(bundle.user_files), "file")
    return (
        f"{files}: sent as one archive ({ARCHIVE_PATH}), unpacked by the bootstrap on each node; set {setting} "
        "to change"
    )
