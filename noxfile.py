"""Developer tasks: `nox` runs tests, lint and typecheck; `nox -s docs` checks the docs."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = False

CONSTRAINTS = ("-c", ".ci/constraints.txt")
#: The storage emulators the upload tests run against (npm): Azurite for Azure Blob, into .ci/node_modules,
#: where tests/backends/azureml_cloud.py looks for `azurite-blob`.
NPM_EMULATORS = ("azurite@3.35.0",)


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite."""
    session.install(*CONSTRAINTS, "-e", ".[test]")
    session.run(
        "npm", "install", "--prefix", ".ci", "--no-save", "--no-audit", "--no-fund", *NPM_EMULATORS, external=True
    )
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
