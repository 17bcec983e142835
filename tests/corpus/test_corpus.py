"""The corpus of real public configurations (tests/corpus/cases/): for each, the request the platform's own tool
builds from the original is compared with crosstrain's render of the job file that expresses it, and the
computed verdict (EQUAL, EQUIVALENT with exactly the listed differences, or REFUSED with the listed reason) must
be the one in the case's expected.yaml. docs/corpus.md explains how to add a case."""

from __future__ import annotations

import pytest

from tests.corpus.cases import PLATFORMS, Case, check, load_cases
from tests.corpus.platforms import compare

CASES = load_cases()


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_case(case: Case) -> None:
    assert not check(case), check(case)
    verdict, found, reason = compare(case)
    listed = "\n".join(f"  {d.path}: original {d.original!r}, crosstrain {d.crosstrain!r}" for d in found)
    assert verdict == case.verdict, f"{case.name}: computed {verdict}{': ' + reason if reason else ''}\n{listed}"
    if verdict == "REFUSED":
        assert str(case.expected["reason"]) in reason, reason
    else:
        assert found == case.differences, f"{case.name}: the differences are not the listed ones:\n{listed}"


def test_corpus_spread() -> None:
    """Enough cases per platform, and at most one in six REFUSED (issue 15's acceptance), counting the cases the
    platform itself still runs: an original on a retired runtime or GPU is refused by its own platform too."""
    per_platform = {p: sum(c.platform == p for c in CASES) for p in PLATFORMS}
    assert per_platform["azureml"] >= 8, per_platform
    assert per_platform["vertex"] >= 8, per_platform
    assert per_platform["aiplatform"] >= 6, per_platform
    # Databricks: public TorchDistributor runs that state their cluster are rare (docs/corpus.md, "Findings").
    assert per_platform["databricks"] >= 5, per_platform
    assert per_platform["air"] >= 4, per_platform  # the AI Runtime cookbook's workload.yaml files
    assert sum(c.verdict == "REFUSED" and not c.platform_refuses for c in CASES) * 6 <= len(CASES)


def test_a_case_without_its_source_or_reasons_is_refused() -> None:
    """The corpus's own rules: where a case comes from, and why each difference does not change the job."""
    case = CASES[0]
    broken = Case(
        case.name,
        case.folder,
        {**case.source, "commit": "main"},
        {"verdict": "EQUIVALENT", "differences": [{"path": "x", "original": 1, "crosstrain": 2}]},
    )
    problems = "\n".join(check(broken))
    assert "commit must be the 40 hex digits" in problems
    assert "difference x says no why" in problems
