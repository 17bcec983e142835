"""Runs a shipped job's command on a node: `python -m crosstrain_code [--install] -- COMMAND [ARGS...]`.

This file travels in every code bundle as `crosstrain_code/__main__.py` (`crosstrain.packaging`), beside the
user's files (`src/`) and crosstrain's runtime (`crosstrain/`). It works the same whether pip installed the
bundle (Google's pre-built containers) or it was unpacked (Azure ML, Databricks, the local target):

* `crosstrain` is importable by the command and every process it starts (`PYTHONPATH`), so a stock image
  with only torch installed runs `python -m crosstrain.launch` and `from crosstrain import runtime`;
* the command runs in the user's folder, with the code folder also on `PYTHONPATH`;
* `--install` pip-installs the bundle's `requirements.txt` first (where the platform does not);
* `python` as the command runs this interpreter, so an image with only `python3` works.

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
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
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        pip += ["-r", str(requirements)]
        print(f"crosstrain: installing {requirements}", file=sys.stderr, flush=True)
        done = subprocess.run(pip, env=environ, check=False)
        if done.returncode:
            print(f"crosstrain: installing the job's requirements failed (exit {done.returncode})", file=sys.stderr)
            return done.returncode
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
