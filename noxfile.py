"""Developer tasks. `nox` runs tests, lint and typecheck from the lock; `nox -s docs` checks the docs.

`latest` and `lowest` run the suite at both ends of the dependency ranges pyproject.toml allows, `yaml` the
input limits under each supported PyYAML, `databricks_newest` the Databricks renders through the newest
databricks-sdk, and `lock` recompiles the lock from `.ci/requirements.in`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = False

ROOT = Path(__file__).parent
#: Every package CI installs, transitive ones included, pinned (`nox -s lock` writes it).
LOCK = ROOT / ".ci" / "constraints.txt"
#: What the lock is compiled from, beside pyproject.toml's extras.
LOCK_INPUT = ROOT / ".ci" / "requirements.in"
#: PyTorch's CPU wheel on this workplace's machines; elsewhere `torch==2.13.0` comes from PyPI.
LOCAL_WHEELS = Path("/opt/wheels")
#: torch is held at the CPU build in `latest` and `lowest` too: any other release is a CUDA build of several GB.
TORCH = "torch==2.13.0"
#: The storage emulators the upload tests run against (npm): Azurite for Azure Blob, into .ci/node_modules,
#: where tests/backends/azureml_cloud.py looks for `azurite-blob`.
NPM_EMULATORS = ("azurite@3.35.0",)
#: The PyYAML releases the input limits are checked under (`nox -s yaml`): the lowest pyproject.toml allows and
#: every later one.
PYYAML_RELEASES = ("6.0.1", "6.0.2", "6.0.3", "6.0.4")


def install_locked(session: nox.Session, *args: str) -> None:
    """pip install from the lock, the build backend of the editable install included: pip installs it in an
    environment of its own, where `-c` does not reach (PIP_BUILD_CONSTRAINT from pip 25.3, PIP_CONSTRAINT before)."""
    session.install("-c", str(LOCK), *args, env={"PIP_CONSTRAINT": str(LOCK), "PIP_BUILD_CONSTRAINT": str(LOCK)})


def require_test_tools(session: nox.Session) -> None:
    """The suite needs npm (Azurite, the Azure Blob emulator) and Java 17 or newer (Spark, for the Databricks
    tests): say so at once rather than fail in a test that does not."""
    if shutil.which("npm") is None:
        session.error(
            "npm was not found: the tests install Azurite, the Azure Blob emulator, with npm. "
            "Install Node.js 18 or newer (with npm), then run nox again"
        )
    home = Path(os.environ.get("JAVA_HOME", "/nonexistent")) / "bin" / "java"  # Spark's choice, where set
    java = str(home) if home.is_file() else shutil.which("java")
    if java is None:
        session.error(
            "java was not found: the Databricks tests run a local Spark, which needs Java 17 or newer. "
            "Install a JDK or JRE 17+ (e.g. `apt-get install openjdk-17-jre-headless`), then run nox again"
        )
    version = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    major = re.search(r'version "(\d+)', version)
    if major is None or int(major.group(1)) < 17:
        session.error(f"Java 17 or newer is needed by Spark (the Databricks tests); {java} says: {version.strip()!r}")
    session.run(
        "npm", "install", "--prefix", ".ci", "--no-save", "--no-audit", "--no-fund", *NPM_EMULATORS, external=True
    )


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite, from the lock."""
    require_test_tools(session)
    install_locked(session, "-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def latest(session: nox.Session) -> None:
    """The suite against the newest release of every dependency, no lock (torch aside): run it before a release
    and before `nox -s lock`, to learn of a break from a new release before users do."""
    require_test_tools(session)
    session.install("--upgrade", "-e", ".[test]", TORCH)
    session.run("pip", "list", "--format=freeze", silent=False)
    session.run("pytest", *session.posargs)


@nox.session
def lowest(session: nox.Session) -> None:
    """The suite against the lowest release pyproject.toml allows of each of crosstrain's dependencies (torch
    aside): run it when a lower bound changes or code starts using something new of a dependency."""
    require_test_tools(session)
    install_locked(session, "uv", TORCH)
    find_links = ("--find-links", str(LOCAL_WHEELS)) if LOCAL_WHEELS.is_dir() else ()
    session.run(
        "uv", "pip", "install", "--python", str(Path(session.bin) / "python"), "--resolution", "lowest-direct",
        *find_links, "-e", ".[test]", TORCH,
    )  # fmt: skip
    session.run("uv", "pip", "list", "--python", str(Path(session.bin) / "python"), silent=False)
    session.run("pytest", *session.posargs)


@nox.session
def databricks_newest(session: nox.Session) -> None:
    """The Databricks renders through the newest databricks-sdk's classes, everything else from the lock: each
    release may add or drop a field or an enum value (0.162.0 dropped `priority_class: CRITICAL`), and submit
    refuses what the installed SDK would not send; CI runs it so a release that changes the classes is known."""
    install_locked(session, "-e", ".[vertex,aiplatform,azureml,databricks]", "pytest", "jsonschema", "cloudpickle")
    session.install("--upgrade", "databricks-sdk")
    session.run("pip", "show", "databricks-sdk", silent=False)
    session.run(
        "pytest", "tests/adaptors/test_databricks.py", "tests/backends/test_databricks_air.py",
        "tests/backends/test_databricks.py", "-k", "golden or round_trip or sdk_classes or priority_class or submit",
        *session.posargs,
    )  # fmt: skip


@nox.session
@nox.parametrize("pyyaml", PYYAML_RELEASES)
@nox.parametrize("libyaml", [True, False], ids=["libyaml", "pure-python"])
def yaml(session: nox.Session, pyyaml: str, libyaml: bool) -> None:
    """The input limits under one PyYAML release, with libyaml's parser or without it (PyYAML built from source
    with PYYAML_FORCE_LIBYAML=0): crosstrain's own limits must speak first."""
    install_locked(session, "-e", ".", "pytest")
    if libyaml:
        session.install(f"pyyaml=={pyyaml}")
    else:
        session.install(f"pyyaml=={pyyaml}", "--no-binary", "pyyaml", "--force-reinstall", "--no-deps",
                        env={"PYYAML_FORCE_LIBYAML": "0"})  # fmt: skip
    check = f"import yaml; assert hasattr(yaml, 'CSafeLoader') is {libyaml}, 'libyaml: ' + str(not {libyaml})"
    session.run("python", "-c", check)
    session.run("pytest", "tests/test_untrusted.py", "tests/test_hostile_input.py", "tests/test_loader.py")


@nox.session
def lint(session: nox.Session) -> None:
    install_locked(session, "ruff", "import-linter")
    session.run("ruff", "check", "src", "tests", "benchmarks", "examples", "noxfile.py", "docs")
    session.run("ruff", "format", "--check", "src", "tests", "benchmarks", "examples", "noxfile.py", "docs")
    session.run("lint-imports", env={"PYTHONPATH": "src"})  # the contracts in pyproject.toml


@nox.session
def typecheck(session: nox.Session) -> None:
    install_locked(session, "-e", ".[dev]")
    session.run("mypy")


@nox.session
def docs(session: nox.Session) -> None:
    """Regenerate docs/job.schema.json and fail if the committed copy is stale."""
    install_locked(session, "-e", ".")
    session.run("python", "docs/generate.py", "--check")


@nox.session
def lock(session: nox.Session) -> None:
    """Recompile the lock: pyproject.toml's extras and `.ci/requirements.in`, resolved to exact releases, torch
    resolved as the CPU wheel where it lies on disk and written without its `+cpu` label (PyPI has no such
    release)."""
    install_locked(session, "uv")
    # The lock's own `torch==2.13.0` would be kept as a preference and match PyPI's CUDA build: look again.
    find_links = ("--find-links", str(LOCAL_WHEELS), "--upgrade-package", "torch") if LOCAL_WHEELS.is_dir() else ()
    session.run(
        "uv", "pip", "compile", "pyproject.toml", str(LOCK_INPUT.relative_to(ROOT)), "--all-extras",
        "--python-version", "3.11", "--custom-compile-command", "nox -s lock", *find_links, "--quiet",
        "--output-file", str(LOCK.relative_to(ROOT)),
    )  # fmt: skip
    LOCK.write_text(re.sub(r"^(torch==[^+\s]+)\+cpu$", r"\1", LOCK.read_text(), flags=re.MULTILINE))
