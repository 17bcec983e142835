"""The files a job names that must ship with it: the file each pool's command runs (`python train.py`,
`bash run.sh`, `./run.sh`) and the DeepSpeed config every rank is given, checked against the code folder on every
target, before anything is sent."""

from __future__ import annotations

import os
import re
from typing import Any

from crosstrain.errors import Problem
from crosstrain.packaging import USER_PREFIX, for_job
from crosstrain.uploads import UploadRefused

#: Interpreters whose first word that is not an option names the file they run (`python train.py`, `bash run.sh`);
#: their options that take the next word as a value, and those that run no file (`-m MODULE`, `-c CODE`, stdin).
_INTERPRETER = re.compile(r"python(3(\.\d+)?)?|bash|sh")
_VALUE_OPTIONS = frozenset({"-W", "-X"})
_NO_FILE = ("-m", "-c")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def problems(job: Any) -> list[Problem]:
    """The files pools' commands run (`python train.py`, `bash run.sh`, `./run.sh`) that the shipped folder does
    not hold. A job with `code:` runs its command in that folder on every target, so every node would fail."""
    config = job.launch.deepspeed_config
    if job.code is None:
        if config and _in_code_folder(config):
            return [
                Problem(
                    "launch.deepspeed_config",
                    f"{config} is a path in the code folder, and the job ships none: no node would find it",
                    "ship the folder that holds it with `code:`, or give an absolute path in the image",
                )
            ]
        return []
    try:
        shipped = for_job(job)
    except UploadRefused:
        return []  # the folder itself is refused by the target's plan
    if shipped is None:
        return []
    files = {f.path.removeprefix(USER_PREFIX) for f in shipped.user_files}
    problems = []
    for pool in job.pools():
        target = _command_file([*(pool.command or []), *pool.args]) if pool.shell_line is None else None
        if target is None:
            continue
        name = os.path.normpath(target)
        if name in files or any(f.startswith(f"{name}/") for f in files):  # a file, or a folder python runs
            continue
        own = getattr(job, pool.role)
        field = "command" if own.command is None else f"{pool.role}.command"
        if pool.role == "workers" and own.command is None and job.primary.command is not None:
            field = "primary.command"
        problems.append(
            Problem(
                field,
                f"{target} is not in the code folder {shipped.folder} (or an ignore file leaves it out); the "
                "command runs in that folder",
                "name the file by its path under the code folder",
            )
        )
    if config and _in_code_folder(config) and os.path.normpath(config) not in files:
        problems.append(
            Problem(
                "launch.deepspeed_config",
                f"{config} is not in the code folder {shipped.folder} (or an ignore file leaves it out); every "
                "rank reads it from there",
                "name the file by its path under the code folder, or give an absolute path in the image",
            )
        )
    return list(dict.fromkeys(problems))


def _command_file(words: list[str]) -> str | None:
    """The relative path of the file a command runs, where it names one."""
    if not words:
        return None
    found: str | None = words[0] if "/" in words[0] else None
    if _INTERPRETER.fullmatch(os.path.basename(words[0])):
        found, rest = None, iter(words[1:])
        for word in rest:
            if word == "-" or word.startswith(_NO_FILE):
                return None
            if word in _VALUE_OPTIONS:
                next(rest, None)
            elif not word.startswith("-"):
                found = word
                break
    return found if found is not None and _in_code_folder(found) else None


def _in_code_folder(path: str) -> bool:
    """Whether a path a command is given names a file of the code folder, not one in the image, on the cluster,
    or filled in on the node."""
    return not (os.path.isabs(path) or path.startswith("~") or "$" in path or _SCHEME.match(path))
