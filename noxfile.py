"""Developer tasks: `nox` runs tests, lint and typecheck; `nox -s docs` checks the docs."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = False

CONSTRAINTS = ("-c", ".ci/constraints.txt")


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite."""
    session.install(*CONSTRAINTS, "-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install(*CONSTRAINTS, "ruff>=0.5")
    session.run("ruff", "check", "src", "tests", "benchmarks", "examples", "noxfile.py", "docs")
    session.run("ruff", "format", "--check", "src", "tests", "benchmarks", "examples", "noxfile.py", "docs")


@nox.session
def typecheck(session: nox.Session) -> None:
    session.install(*CONSTRAINTS, "-e", ".[dev]")
    session.run("mypy")


@nox.session
def docs(session: nox.Session) -> None:
    """Regenerate docs/job.schema.json and fail if the committed copy is stale."""
    session.install(*CONSTRAINTS, "-e", ".")
    session.run("python", "docs/generate.py", "--check")
