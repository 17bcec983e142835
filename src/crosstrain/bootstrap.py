"""Runs a shipped job's command on a node: `python -m crosstrain_code [--install] -- COMMAND [ARGS...]`.

This file travels in every code bundle as `crosstrain_code/__main__.py` (`crosstrain.packaging`), beside the
user's files (`src/`) and crosstrain's runtime (`crosstrain/`). It works the same whether pip installed the
bundle (Google's pre-built containers) or it was unpacked (Azure ML, Databricks, the local target):

* `crosstrain` is importable by the command and every process it starts (`PYTHONPATH`), so a stock image
  with only torch installed runs `python -m crosstrain.launch` and `from crosstrain import runtime`;
* the command runs in the user's folder, with the code folder also on `PYTHONPATH`;
* `--install` pip-installs the bundle's `requirements.txt` first (where the platform does not), once per node:
  where the platform starts the bootstrap in every process of a node (Azure ML per process, MPI), the first
  installs and the others wait for it (`install`);
* `python` as the command runs this interpreter, so an image with only `python3` works.

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import collections
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

USAGE = "usage: python -m crosstrain_code [--install] -- COMMAND [ARGS...]"
PYTHON_NAMES = ("python", "python3")


def prepare(here: Path, environ: dict[str, str]) -> Path:
    """Put the runtime and the code on `PYTHONPATH` in `environ`; returns the code folder."""
    code = here / "src"
    paths = [str(here), str(code)]
    if environ.get("PYTHONPATH"):
        paths.append(environ["PYTHONPATH"])
    environ["PYTHONPATH"] = os.pathsep.join(paths)
    environ["CROSSTRAIN_CODE_DIR"] = str(code)
    return code


#: The last lines of pip's output kept for the processes that waited for it, to say why it failed.
TAIL_LINES = 40


def install_once(requirements: Path, environ: dict[str, str]) -> int:
    """pip-install `requirements` once on this node; returns pip's exit code (0: installed).

    Where the platform starts the bootstrap in every process of a node, concurrent pips writing into one
    environment break it. So the processes take turns on an exclusive lock in the node's temporary folder,
    keyed by this bundle, its requirements and this interpreter: the first installs and leaves a record of how
    it went; each other one finds it and skips, or fails with the first one's error rather than running
    without the requirements. A process that dies while installing leaves no record: the next one installs."""
    key = hashlib.sha256(
        b"\0".join([str(requirements.resolve()).encode(), requirements.read_bytes(), sys.executable.encode()])
    ).hexdigest()[:32]
    folder = Path(tempfile.gettempdir()) / "crosstrain-install"
    folder.mkdir(exist_ok=True)
    record = folder / f"{key}.json"
    with open(folder / f"{key}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say("another process on this node is installing the job's requirements: waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if record.is_file():
            done = json.loads(record.read_text())
            if done["exit"]:
                _say(f"installing the job's requirements failed in another process on this node (exit {done['exit']}):")
                sys.stderr.write(done["output"])
            else:
                _say("the job's requirements are installed on this node")
            return int(done["exit"])
        code, output = _pip(requirements, environ)
        partial = record.with_suffix(f".{os.getpid()}")
        partial.write_text(json.dumps({"exit": code, "output": output}))
        os.replace(partial, record)
        return code


def _pip(requirements: Path, environ: dict[str, str]) -> tuple[int, str]:
    """Run pip on `requirements`, its output passed on as it comes; returns its exit code and last lines."""
    _say(f"installing {requirements}")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", str(requirements)]
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    with subprocess.Popen(pip, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as running:
        assert running.stdout is not None
        for raw in running.stdout:
            line = raw.decode(errors="replace")
            sys.stderr.write(line)
            sys.stderr.flush()
            tail.append(line)
    if running.returncode:
        _say(f"installing the job's requirements failed (exit {running.returncode})")
    return running.returncode, "".join(tail)


def _say(message: str) -> None:
    print(f"crosstrain: {message}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    install = False
    while argv and argv[0] != "--":
        if argv[0] == "--install":
            install = True
            argv = argv[1:]
        else:
            print(f"crosstrain: unknown option {argv[0]!r}\n{USAGE}", file=sys.stderr)
            return 2
    command = argv[1:]
    if not command:
        print(f"crosstrain: no command\n{USAGE}", file=sys.stderr)
        return 2
    here = Path(__file__).resolve().parent
    environ = dict(os.environ)
    code = prepare(here, environ)
    requirements = here / "requirements.txt"
    if install and requirements.is_file() and requirements.stat().st_size:
        failed = install_once(requirements, environ)
        if failed:
            return failed
    if command[0] in PYTHON_NAMES:
        command = [sys.executable, *command[1:]]
    code.mkdir(exist_ok=True)  # a bundle that holds only a function has no files of its own
    os.chdir(code)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], command, environ)
    except OSError as exc:
        print(f"crosstrain: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
