"""The corpus's cases on disk: tests/corpus/cases/<platform>-<short-name>/ with `source.yaml` (where the original
comes from), the original (or, where its licence does not allow a copy, the topology in our own words), `job.yaml`
(the crosstrain job expressing it) and `expected.yaml` (the verdict the test must compute)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CASES = Path(__file__).parent / "cases"
PLATFORMS = ("azureml", "vertex", "aiplatform", "databricks", "air")
VERDICTS = ("EQUAL", "EQUIVALENT", "REFUSED")
EXPECTED_KEYS = {"verdict", "differences", "reason", "platform_refuses"}
SOURCE_KEYS = {"repo", "path", "commit", "licence", "url", "notes", "original", "variables", "copied"}


@dataclass(frozen=True)
class Difference:
    """One field where crosstrain's request differs from the original's, after normalization."""

    path: str
    original: Any
    crosstrain: Any


@dataclass(frozen=True)
class Case:
    name: str
    folder: Path
    source: dict[str, Any]
    expected: dict[str, Any]

    @property
    def platform(self) -> str:
        return self.name.split("-", 1)[0]

    @property
    def job(self) -> Path:
        return self.folder / "job.yaml"

    @property
    def original(self) -> Path:
        """The file the platform's own tool reads (named in source.yaml)."""
        return self.folder / str(self.source["original"])

    @property
    def variables(self) -> dict[str, str]:
        """Values for the shell variables of a command line (`$REGION`), chosen for the test."""
        return {str(k): str(v) for k, v in (self.source.get("variables") or {}).items()}

    @property
    def verdict(self) -> str:
        return str(self.expected["verdict"])

    @property
    def platform_refuses(self) -> bool:
        """A case the platform itself no longer runs (a retired runtime or GPU): crosstrain's refusal costs nothing."""
        return bool(self.expected.get("platform_refuses"))

    @property
    def differences(self) -> list[Difference]:
        return [
            Difference(str(d["path"]), d.get("original"), d.get("crosstrain"))
            for d in self.expected.get("differences") or []
        ]


def _read(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a mapping")
    return data


def check(case: Case) -> list[str]:
    """What is wrong with the case's own files (each case must say where it comes from and what it expects)."""
    problems: list[str] = []
    if case.platform not in PLATFORMS:
        problems.append(f"{case.name}: the folder name must start with one of {PLATFORMS}")
    for key in ("repo", "path", "commit", "licence", "url", "original"):
        if not case.source.get(key):
            problems.append(f"{case.name}/source.yaml: {key} is required")
    problems += [f"{case.name}/source.yaml: unknown key {key}" for key in set(case.source) - SOURCE_KEYS]
    if len(str(case.source.get("commit", ""))) != 40:
        problems.append(f"{case.name}/source.yaml: commit must be the 40 hex digits of the commit read")
    if case.verdict not in VERDICTS:
        problems.append(f"{case.name}/expected.yaml: verdict must be one of {VERDICTS}")
    problems += [f"{case.name}/expected.yaml: unknown key {key}" for key in set(case.expected) - EXPECTED_KEYS]
    if case.verdict == "REFUSED" and not case.expected.get("reason"):
        problems.append(f"{case.name}/expected.yaml: a REFUSED case gives the reason crosstrain refuses with")
    if "platform_refuses" in case.expected and (case.verdict != "REFUSED" or not case.expected["platform_refuses"]):
        problems.append(f"{case.name}/expected.yaml: platform_refuses says why the platform refuses a REFUSED case")
    if case.verdict == "EQUIVALENT":
        for item in case.expected.get("differences") or []:
            if not str(item.get("why", "")).strip():
                problems.append(f"{case.name}/expected.yaml: difference {item.get('path')} says no why")
        if not case.expected.get("differences"):
            problems.append(f"{case.name}/expected.yaml: an EQUIVALENT case lists its differences")
    if not case.original.is_file() or not case.job.is_file():
        problems.append(f"{case.name}: the original ({case.source.get('original')}) and job.yaml must exist")
    return problems


def load_cases() -> list[Case]:
    return [
        Case(folder.name, folder, _read(folder / "source.yaml"), _read(folder / "expected.yaml"))
        for folder in sorted(CASES.iterdir())
        if folder.is_dir()
    ]
