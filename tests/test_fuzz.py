"""Fuzzed specs through every target: no crash, every accepted render valid for its platform, every refusal
with a field path and a fix (tests/fuzzing.py draws the specs and sorts the outcomes).

CI runs a bounded number of examples per case. `pytest -m fuzz_long tests/test_fuzz.py` runs ten times more;
`CROSSTRAIN_FUZZ_EXAMPLES=N` sets the number for either. `benchmarks/fuzz.py` counts outcomes over 10,000 specs.
The specs fuzzing found are kept below as regression cases, each checked through the same path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from tests import fuzzing

#: Examples per case in CI; `fuzz_long` runs ten times as many.
EXAMPLES = int(os.environ.get("CROSSTRAIN_FUZZ_EXAMPLES", "40"))
#: The most one spec may take to load, render and format (the slowest of 10,000 takes well under one).
SECONDS = 10.0


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a `train.py`, as the current directory (a Databricks render uploads the file it names)."""
    monkeypatch.chdir(fuzzing.prepare(tmp_path))
    return tmp_path


def check(case: str, folder: Path, examples: int) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    @given(spec=fuzzing.specs())
    def one(spec: dict[str, Any]) -> None:
        result = fuzzing.outcome(case, spec, folder)
        assert result.kind in ("accepted", "refused"), result.report(case, spec)
        # A render is bounded: a 10,001-node local plan took minutes and gigabytes before it was refused.
        assert result.seconds < SECONDS, f"{case}: {result.seconds:.1f} s for {fuzzing.short(repr(spec))}"

    one()


@pytest.mark.parametrize("case", fuzzing.CASES)
def test_fuzzed_specs_are_accepted_validly_or_refused_with_path_and_fix(case: str, folder: Path) -> None:
    check(case, folder, EXAMPLES)


@pytest.mark.fuzz_long
@pytest.mark.parametrize("case", fuzzing.CASES)
def test_ten_times_more_fuzzed_specs(case: str, folder: Path) -> None:
    check(case, folder, EXAMPLES * 10)


# -- what fuzzing found ----------------------------------------------------------------------------------------
BASE: dict[str, Any] = {
    "name": "j",
    "image": "registry.example/t:1",
    "command": "python train.py",
    "primary": {"machine": "T4"},
}
REDUCER = "reduction_server.machine_type"
#: (case, spec, the paths of the problems it is refused with). Each crashed, was accepted invalid, or was refused
#: without a path before its fix.
FOUND: list[tuple[str, dict[str, Any], set[str]]] = [
    # KeyError: 'H100-NVL': a machine type paired with a GPU its platform lacks.
    (
        "vertex",
        {
            "name": "j",
            "image": "i",
            "primary": {"machine": {"type": "a2-highgpu-8g", "accelerator": {"type": "H100-NVL"}}},
        },
        {"primary.machine"},
    ),
    (
        "databricks-gcp",
        {
            "name": "j",
            "command": "python train.py",
            "primary": {"machine": {"type": "a2-highgpu-8g", "accelerator": {"type": "H200"}}},
        },
        {"primary.machine"},
    ),
    (
        "databricks-aws",
        {
            "name": "j",
            "command": "python train.py",
            "primary": {"machine": {"type": "g5.xlarge", "accelerator": {"type": "P100", "count": 15}}},
        },
        {"primary.machine"},
    ),
    # OverflowError: 400 digits of days are an infinite float.
    ("fake", {"name": "j", "scheduling": {"timeout": "9" * 400 + "d"}}, {"scheduling.timeout"}),
    # Accepted, and invalid: neither masterConfig.imageUri nor runtimeVersion.
    ("aiplatform", {"name": "A"}, {"image"}),
    # Accepted, and invalid for Vertex AI: 101 variables in a container, a 50 GB boot disk, a 10**400 s timeout.
    (
        "vertex",
        {**BASE, "env": {f"VAR_{i}": str(i) for i in range(101)}},
        {"env"},
    ),
    ("vertex", {**BASE, "primary": {"machine": "T4", "boot_disk": {"size_gb": 50}}}, {"primary.boot_disk.size_gb"}),
    ("vertex", {**BASE, "scheduling": {"timeout": 10**400}}, {"scheduling.timeout"}),
    # Refused without a path: the unknown key was "", or held a '[' (taken for a pydantic tag and dropped).
    ("fake", {"name": "j", "": {}}, {'""'}),
    ("fake", {"name": "j", "[": None}, {"["}),
    # Refused with pydantic's wording and no fix.
    ("fake", {"name": "j", "primary": {"machine": "A100:²"}}, {"primary.machine"}),
    ("fake", {"name": "j", "command": "python 'unclosed"}, {"command"}),
    ("fake", {"name": "j", "scheduling": {"spot": None}}, {"scheduling.spot"}),
    ("fake", {"name": "j", "scheduling": {"timeout": 1.5}}, {"scheduling.timeout"}),
    (
        "databricks-aws",
        {**BASE, "targets": {"databricks": {"workspace_dir": "A100:x"}}},
        {"targets.databricks.workspace_dir"},
    ),
    (
        "azureml",
        {**BASE, "targets": {"azureml": {"distributed_job_config": 5}}},
        {"targets.azureml.distributed_job_config"},
    ),
    # Accepted, and not JSON: an infinite number of seconds in the settings the request carries.
    ("fake", {**BASE, "targets": {"fake": {"run_seconds": "inf"}}}, {"targets.fake.run_seconds"}),
    ("local", {**BASE, "targets": {"local": {"grace_seconds": "nan"}}}, {"targets.local.grace_seconds"}),
    # CatalogError escaped (exit 1): the reducers' machine type with a space, in capitals, or as a GPU.
    *[
        ("vertex", {**BASE, "workers": {"replicas": 1}, "reduction_server": {"machine_type": machine}}, {REDUCER})
        for machine in ("n1-standard-8 ", "N1-HIGHCPU-16", "A100:0", "g5.xlarge", "", "a2-highgpu-1g")
    ],
    # A plan of 10,001 nodes, each listing every node: gigabytes before anything ran.
    ("local-vertex", {"name": "j", "command": "python train.py", "workers": {"replicas": 10000}}, {"workers.replicas"}),
]


@pytest.mark.parametrize(("case", "spec", "paths"), FOUND, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(FOUND)])
def test_what_fuzzing_found_is_refused_with_its_path(
    case: str, spec: dict[str, Any], paths: set[str], folder: Path
) -> None:
    from crosstrain.errors import SpecError
    from crosstrain.loader import job_from_dict
    from crosstrain.registry import create_backend

    result = fuzzing.outcome(case, spec, folder)
    assert result.kind == "refused", result.report(case, spec)
    target, case_settings = fuzzing.CASES[case]
    with pytest.raises(SpecError) as refused:
        create_backend(target, environ={}).render(job_from_dict(spec), case_settings(folder))
    assert {p.path for p in refused.value.problems} == paths
