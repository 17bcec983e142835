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
* `python` as the command runs this interpreter, so an image with only `python3` works;
* a bundle whose user files came as one archive (`src.tar.gz` beside this file: `crosstrain.code_archive`) is
  unpacked into `src/` first, once per node, under a lock as the install is (`unpack_once`).

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
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


#: `${sweep.NAME}` in a command word or an environment value: the trial's value of a sweep parameter.
SWEEP_REFERENCE = re.compile(r"\$\{sweep\.([A-Za-z_][A-Za-z0-9_-]*)\}")


def fill_sweep(command: list[str], environ: dict[str, str]) -> list[str]:
    """In a sweep's trial (`CROSSTRAIN_SWEEP` names its parameters), the command and `environ` with every
    `${sweep.NAME}` set to the trial's value, and `CROSSTRAIN_SWEEP_<NAME>` set for each. The values come from
    crosstrain's own variables, Azure ML's `AZUREML_SWEEP_<NAME>`, or the `--NAME=VALUE` (or `--NAME VALUE`)
    arguments Vertex AI and AI Platform append to the command: where the command places the values itself, those
    appended arguments are taken off its end."""
    listed = environ.get("CROSSTRAIN_SWEEP", "")
    if command and command[0] == "env":  # AI Platform has no variables: the command runs under `env NAME=VALUE`
        listed = next((word.split("=", 1)[1] for word in command if word.startswith("CROSSTRAIN_SWEEP=")), listed)
    names = [name for name in listed.split(",") if name]
    names += sorted({found[1] for word in command for found in SWEEP_REFERENCE.finditer(word)} - set(names))
    if not names:
        return command
    values: dict[str, str] = {}
    for name in names:
        given = environ.get(f"CROSSTRAIN_SWEEP_{name.replace('-', '_')}", environ.get(f"AZUREML_SWEEP_{name}"))
        if given is not None:
            values[name] = given
    rest = list(command)
    if any(SWEEP_REFERENCE.search(word) for word in rest):  # the command places them: take the appended ones off
        while rest:
            key, eq, value = rest[-1].partition("=")
            if eq and key.startswith("--") and key[2:] in names and key[2:] not in values:
                values[key[2:]] = value
                rest.pop()
            elif len(rest) > 1 and rest[-2].startswith("--") and rest[-2][2:] in names and rest[-2][2:] not in values:
                if SWEEP_REFERENCE.search(rest[-1]):
                    break
                values[rest[-2][2:]] = rest[-1]
                del rest[-2:]
            else:
                break
    missing = sorted({found[1] for word in rest for found in SWEEP_REFERENCE.finditer(word)} - set(values))
    if missing:
        _say(f"no value for {', '.join(missing)} in this trial: ${{sweep.NAME}} stays as written")

    def fill(text: str) -> str:
        return SWEEP_REFERENCE.sub(lambda found: values.get(found[1], found[0]), text)

    for name, value in list(environ.items()):
        if "${sweep." in value:
            environ[name] = fill(value)
    for name, value in values.items():
        environ[f"CROSSTRAIN_SWEEP_{name.replace('-', '_')}"] = value
    return [fill(word) for word in rest]


#: The last lines of pip's output kept for the processes that waited for it, to say why it failed.
TAIL_LINES = 40


#: Where the processes of a node take turns (`_node_turn`) and leave their records.
_NODE_FOLDER = Path(tempfile.gettempdir()) / "crosstrain-install"


@contextlib.contextmanager
def _node_turn(name: str, doing: str) -> Iterator[None]:
    """This process's turn at what one process of the node does for all (`doing`): an exclusive lock on the
    file `name` in the node's temporary folder, held until the block ends, saying so when another has it."""
    _NODE_FOLDER.mkdir(exist_ok=True)
    with open(str(_NODE_FOLDER / name), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say(f"another process on this node is {doing}: waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


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
    record = _NODE_FOLDER / f"{key}.json"
    with _node_turn(f"{key}.lock", "installing the job's requirements"):
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


#: The user's files as one archive, beside this file (`crosstrain.code_archive.ARCHIVED`).
ARCHIVED = "src.tar.gz"


def unpack_once(here: Path) -> None:
    """Unpack `here/src.tar.gz` into `here/src` once on this node. Where the platform starts the bootstrap in
    every process of a node, they take turns on a lock keyed by the archive's path, as `install_once` does: the
    first unpacks (into a scratch folder beside `src`, renamed into place whole), the others wait and find it.
    The extraction is the bundle's own (`crosstrain.databricks_task.extract`: files and folders only, named
    under the folder)."""
    archive, code = here / ARCHIVED, here / "src"
    key = hashlib.sha256(str(archive.resolve()).encode()).hexdigest()[:32]
    with _node_turn(f"{key}.unpack.lock", "unpacking the job's code"):
        if code.is_dir():
            return
        if str(here) not in sys.path:
            sys.path.insert(0, str(here))  # the bundle's crosstrain, whatever the image has
        from crosstrain.databricks_task import extract

        _say(f"unpacking {archive}")
        scratch = Path(tempfile.mkdtemp(prefix=".src.", dir=str(here)))
        try:
            extract(str(archive), str(scratch))
            found = sorted(scratch.glob("*/*/src"))  # crosstrain_code-1.0/crosstrain_code/src: the sdist's layout
            inside = found[0] if found else scratch / "src"
            inside.mkdir(parents=True, exist_ok=True)  # an archive of no files
            os.rename(str(inside), str(code))
        finally:
            shutil.rmtree(str(scratch), ignore_errors=True)


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
    command = fill_sweep(command, environ)
    if (here / ARCHIVED).is_file() and not code.is_dir():
        try:
            unpack_once(here)
        except Exception as exc:  # an unsafe member (`UnsafeArchive`), a truncated archive, a full disk
            _say(f"cannot unpack the job's code ({here / ARCHIVED}): {exc}")
            return 1
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
