"""The accelerator catalog: portable GPUs -> each platform's machines, and the pairings it refuses."""

from __future__ import annotations

import re

import pytest

from crosstrain import catalog
from crosstrain.catalog import CatalogError, ResolvedMachine, resolve

REQUIRED_KINDS = ("T4", "V100", "P100", "A100", "A100-80GB", "L4", "H100", "H200")


def test_the_catalog_covers_the_required_gpu_kinds() -> None:
    for kind in REQUIRED_KINDS:
        assert kind in catalog.gpu_names()
        assert any(kind in catalog.OFFERS[p] for p in catalog.PLATFORMS), kind
    assert set(REQUIRED_KINDS) <= set(catalog.OFFERS["vertex"])


def test_every_platform_has_offers_for_every_target() -> None:
    assert set(catalog.PLATFORMS) == set(catalog.OFFERS)
    for platform, offers in catalog.OFFERS.items():
        assert offers, platform
        for gpu in offers:
            assert gpu in catalog.gpu_names(), (platform, gpu)


def test_every_listed_machine_resolves_to_itself() -> None:
    for platform, offers in catalog.OFFERS.items():
        for gpu, offer in offers.items():
            for count, machines in offer.machines.items():
                for machine in machines:
                    got = resolve(platform, machine_type=machine, gpu=None, gpu_count=None)
                    assert (got.gpu, got.gpu_count, got.machine_type) == (gpu, count, machine)
                    assert resolve(platform, machine_type=machine, gpu=gpu, gpu_count=count) == got


@pytest.mark.parametrize(
    ("platform", "gpu", "count", "expected"),
    [
        ("vertex", "A100", 8, ResolvedMachine("a2-highgpu-8g", "A100", 8, "NVIDIA_TESLA_A100")),
        ("vertex", "A100", 16, ResolvedMachine("a2-megagpu-16g", "A100", 16, "NVIDIA_TESLA_A100")),
        ("vertex", "nvidia_a100_80gb", 4, ResolvedMachine("a2-ultragpu-4g", "A100-80GB", 4, "NVIDIA_A100_80GB")),
        ("vertex", "H100", 8, ResolvedMachine("a3-highgpu-8g", "H100", 8, "NVIDIA_H100_80GB")),
        ("vertex", "H200", 8, ResolvedMachine("a3-ultragpu-8g", "H200", 8, "NVIDIA_H200_141GB")),
        ("vertex", "L4", 1, ResolvedMachine("g2-standard-8", "L4", 1, "NVIDIA_L4")),
        ("vertex", "V100", 8, ResolvedMachine("n1-highmem-96", "V100", 8, "NVIDIA_TESLA_V100")),
        ("vertex", "T4", 2, ResolvedMachine("n1-standard-16", "T4", 2, "NVIDIA_TESLA_T4")),
        ("aiplatform", "P100", 4, ResolvedMachine("n1-standard-32", "P100", 4, "NVIDIA_TESLA_P100")),
        ("aiplatform", "A100", 8, ResolvedMachine("a2-highgpu-8g", "A100", 8, "NVIDIA_TESLA_A100")),
        ("azureml", "A100", 8, ResolvedMachine("Standard_ND96asr_v4", "A100", 8, None)),
        ("azureml", "H100", 8, ResolvedMachine("Standard_ND96isr_H100_v5", "H100", 8, None)),
        ("azureml", "T4", 1, ResolvedMachine("Standard_NC4as_T4_v3", "T4", 1, None)),
        ("databricks-aws", "A100", 8, ResolvedMachine("p4d.24xlarge", "A100", 8, None)),
        ("databricks-aws", "A10G", 4, ResolvedMachine("g5.12xlarge", "A10G", 4, None)),
        ("databricks-azure", "A100-80GB", 1, ResolvedMachine("Standard_NC24ads_A100_v4", "A100-80GB", 1, None)),
        ("databricks-gcp", "L4", 8, ResolvedMachine("g2-standard-96", "L4", 8, None)),
        # issue 24, finding 11: the GPUs the platforms' lists added (read 2026-11-26)
        ("vertex", "B200", 8, ResolvedMachine("a4-highgpu-8g", "B200", 8, "NVIDIA_B200")),
        ("vertex", "nvidia_b200", 8, ResolvedMachine("a4-highgpu-8g", "B200", 8, "NVIDIA_B200")),
        ("databricks-aws", "L40S", 1, ResolvedMachine("g6e.xlarge", "L40S", 1, None)),
        ("databricks-aws", "L40S", 4, ResolvedMachine("g6e.12xlarge", "L40S", 4, None)),
        ("databricks-aws", "NVIDIA_L40S", 8, ResolvedMachine("g6e.48xlarge", "L40S", 8, None)),
        ("databricks-aws", "L4", 4, ResolvedMachine("g6.12xlarge", "L4", 4, None)),
        ("databricks-aws", "L4", 8, ResolvedMachine("g6.48xlarge", "L4", 8, None)),
        ("azureml", "H200", 8, ResolvedMachine("Standard_ND96isr_H200_v5", "H200", 8, None)),
        ("azureml", "H100-NVL", 2, ResolvedMachine("Standard_NC80adis_H100_v5", "H100-NVL", 2, None)),
        ("azureml", "A100-80GB", 2, ResolvedMachine("Standard_NC48ads_A100_v4", "A100-80GB", 2, None)),
        ("databricks-azure", "A10", 1, ResolvedMachine("Standard_NV36ads_A10_v5", "A10G", 1, None)),
        ("databricks-azure", "A10G", 2, ResolvedMachine("Standard_NV72ads_A10_v5", "A10G", 2, None)),
        ("databricks-azure", "H100-NVL", 1, ResolvedMachine("Standard_NC40ads_H100_v5", "H100-NVL", 1, None)),
    ],
)
def test_portable_gpus_pick_a_machine(platform: str, gpu: str, count: int, expected: ResolvedMachine) -> None:
    assert resolve(platform, machine_type=None, gpu=gpu, gpu_count=count) == expected


def refusal(platform: str, **kwargs: object) -> tuple[str, str, str]:
    with pytest.raises(CatalogError) as err:
        resolve(platform, **kwargs)  # type: ignore[arg-type]
    p = err.value.problem
    return p.path, p.message, p.fix


def test_a100_on_a_non_a2_machine_is_refused_with_the_choices() -> None:
    path, message, fix = refusal("vertex", machine_type="n1-standard-8", gpu="A100", gpu_count=8)
    assert (path, message) == ("machine", "n1-standard-8 cannot carry A100 on vertex")
    assert "A100:8 (a2-highgpu-8g)" in fix
    assert "A100:16 (a2-megagpu-16g)" in fix


def test_a_count_the_machine_cannot_carry_is_refused() -> None:
    path, message, fix = refusal("vertex", machine_type="a2-highgpu-8g", gpu="A100", gpu_count=4)
    assert message == "a2-highgpu-8g carries 8 x A100, not 4 x A100"
    assert "A100:4 (a2-highgpu-4g)" in fix
    path, message, fix = refusal("vertex", machine_type="n1-standard-16", gpu="T4", gpu_count=3)
    assert (path, fix) == ("machine.accelerator.count", "use a count of 1, 2, 4")
    path, message, fix = refusal("azureml", machine_type=None, gpu="A100", gpu_count=4)
    assert message == "azureml has no machine with 4 x A100"
    assert fix == (  # the hint once stopped at A100:8, though Azure has 4 x A100 80 GB
        "pick from: A100:8 (Standard_ND96asr_v4); A100-80GB:1 (Standard_NC24ads_A100_v4); A100-80GB:2 "
        "(Standard_NC48ads_A100_v4); A100-80GB:4 (Standard_NC96ads_A100_v4); A100-80GB:8 (Standard_ND96amsr_A100_v4)"
    )
    path, message, fix = refusal("azureml", machine_type=None, gpu="H100", gpu_count=2)
    assert (
        fix == "pick from: H100:8 (Standard_ND96isr_H100_v5); H100-NVL:1 (Standard_NC40ads_H100_v5); H100-NVL:2 "
        "(Standard_NC80adis_H100_v5)"
    )


@pytest.mark.parametrize(
    ("platform", "machine_type", "gpu"),
    [
        ("vertex", "a2-highgpu-8g", "H100-NVL"),  # the fuzzed spec that raised KeyError: 'H100-NVL'
        ("databricks-gcp", "a2-highgpu-8g", "H200"),
        ("databricks-aws", "g5.xlarge", "P100"),
        ("aiplatform", "a2-highgpu-1g", "L4"),
    ],
)
def test_a_machine_paired_with_a_gpu_the_platform_lacks_is_refused(platform: str, machine_type: str, gpu: str) -> None:
    path, message, fix = refusal(platform, machine_type=machine_type, gpu=gpu, gpu_count=None)
    assert path == "machine"
    assert message.startswith(f"{machine_type} carries ")
    assert message.endswith(f"1 x {catalog.canonical_gpu(gpu)}")
    assert fix.startswith("drop the accelerator, or ")
    assert f"offers no {catalog.canonical_gpu(gpu)}" in fix


def test_gpus_a_platform_lacks_are_refused() -> None:
    path, message, fix = refusal("aiplatform", machine_type=None, gpu="H100", gpu_count=8)
    assert path == "machine.accelerator.type"
    assert message == "aiplatform does not offer H100 in crosstrain's catalog"
    assert "A100" in fix
    assert "H100" not in fix
    assert refusal("aiplatform", machine_type="a3-highgpu-8g", gpu="H100", gpu_count=8)[1] == message
    assert refusal("azureml", machine_type=None, gpu="L4", gpu_count=1)[1].startswith("azureml does not offer L4")


def test_every_offer_says_where_and_when_it_was_read() -> None:
    for platform, offers in catalog.OFFERS.items():
        for gpu, offer in offers.items():
            assert offer.sources, (platform, gpu)
            for source in offer.sources:
                assert source.where.startswith("https://"), (platform, gpu, source)
                assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", source.read), (platform, gpu, source)


@pytest.mark.parametrize(
    ("platform", "gpu", "count", "offered"),
    [
        ("vertex", "B200", 4, "B200:8 (a4-highgpu-8g)"),
        ("databricks-aws", "L40S", 2, "L40S:4 (g6e.12xlarge, g6e.24xlarge)"),
        ("databricks-azure", "A100-80GB", 8, "A100-80GB:4 (Standard_NC96ads_A100_v4)"),  # no ND96amsr there
        ("databricks-azure", "A10G", 4, "A10G:2 (Standard_NV72ads_A10_v5)"),
    ],
)
def test_a_count_the_new_gpus_lack_is_refused_with_what_is_offered(
    platform: str, gpu: str, count: int, offered: str
) -> None:
    path, message, fix = refusal(platform, machine_type=None, gpu=gpu, gpu_count=count)
    assert (path, message) == ("machine.accelerator.count", f"{platform} has no machine with {count} x {gpu}")
    assert fix.startswith("pick from: ")
    assert offered in fix


@pytest.mark.parametrize(
    ("platform", "gpu", "offered"),
    [
        ("vertex", "L40S", "B200"),  # L40S is a Databricks-on-AWS GPU only
        ("aiplatform", "B200", "A100"),  # the legacy enum ends at NVIDIA_TESLA_A100
        ("databricks-aws", "B200", "L40S"),
        ("databricks-gcp", "B200", "L4"),
        ("databricks-gcp", "H200", "H100"),
        ("databricks-azure", "H200", "A10G"),
        ("azureml", "L40S", "H200"),
    ],
)
def test_a_new_gpu_a_platform_lacks_is_refused_with_what_is_offered(platform: str, gpu: str, offered: str) -> None:
    path, message, fix = refusal(platform, machine_type=None, gpu=gpu, gpu_count=None)
    assert path == "machine.accelerator.type"
    assert message == f"{platform} does not offer {gpu} in crosstrain's catalog"
    assert fix.startswith("use one of ")
    assert offered in fix.split(", ")
    assert gpu not in fix.split(", ")


def test_the_new_machine_types_are_known_by_name() -> None:
    assert resolve("databricks-aws", machine_type="g6e.12xlarge", gpu=None, gpu_count=None) == ResolvedMachine(
        "g6e.12xlarge", "L40S", 4
    )
    assert resolve("vertex", machine_type="a4-highgpu-8g", gpu=None, gpu_count=None) == ResolvedMachine(
        "a4-highgpu-8g", "B200", 8, "NVIDIA_B200"
    )
    path, message, fix = refusal("databricks-aws", machine_type="g6e.12xlarge", gpu="L4", gpu_count=4)
    assert (path, message) == ("machine", "g6e.12xlarge carries 4 x L40S, not 4 x L4")
    assert "L4:4 (g6.12xlarge, g6.24xlarge)" in fix
    # A100-80GB:8 is a machine of Azure ML, not of Azure Databricks: the size passes through there unknown
    assert resolve("databricks-azure", machine_type="Standard_ND96amsr_A100_v4", gpu=None, gpu_count=None) == (
        ResolvedMachine("Standard_ND96amsr_A100_v4")
    )


def test_mi300x_is_not_in_the_catalog() -> None:
    """AMD GPUs are left out: crosstrain's runtime and environments are CUDA-only (see the module docstring)."""
    assert catalog.canonical_gpu("MI300X") is None
    assert refusal("azureml", machine_type=None, gpu="MI300X", gpu_count=8)[1] == "unknown GPU 'MI300X'"


def test_another_platforms_machine_type_is_refused() -> None:
    path, message, fix = refusal("vertex", machine_type="Standard_ND96asr_v4", gpu=None, gpu_count=None)
    assert (path, message) == ("machine.type", "'Standard_ND96asr_v4' is not a vertex machine type")
    assert "A100:8" in fix
    assert refusal("azureml", machine_type="a2-highgpu-8g", gpu=None, gpu_count=None)[0] == "machine.type"
    assert refusal("databricks-aws", machine_type="n1-standard-8", gpu=None, gpu_count=None)[0] == "machine.type"


def test_unknown_machine_types_pass_through() -> None:
    assert resolve("vertex", machine_type="c3-standard-8", gpu=None, gpu_count=None) == ResolvedMachine("c3-standard-8")
    assert resolve("vertex", machine_type="n1-standard-4", gpu="V100", gpu_count=2) == ResolvedMachine(
        "n1-standard-4", "V100", 2, "NVIDIA_TESLA_V100"
    )
    assert resolve("azureml", machine_type="Standard_NC6_Promo", gpu="T4", gpu_count=1) == ResolvedMachine(
        "Standard_NC6_Promo", "T4", 1, None
    )
    assert resolve("vertex", machine_type=None, gpu=None, gpu_count=None) == ResolvedMachine(None)


def test_count_without_type_and_unknown_names() -> None:
    assert refusal("vertex", machine_type=None, gpu=None, gpu_count=4)[1] == "an accelerator count needs a GPU type"
    assert refusal("vertex", machine_type=None, gpu="GTX1080", gpu_count=1)[1] == "unknown GPU 'GTX1080'"


def test_infiniband_is_read_from_the_azure_size_name() -> None:
    assert ResolvedMachine("Standard_ND96asr_v4").infiniband
    assert ResolvedMachine("Standard_NC24rs_v3").infiniband
    assert ResolvedMachine("Standard_ND96isr_H100_v5").infiniband
    assert not ResolvedMachine("Standard_NC24s_v3").infiniband
    assert not ResolvedMachine("Standard_NC24ads_A100_v4").infiniband
    assert not ResolvedMachine("a2-highgpu-8g").infiniband


# -- names as users spell them -----------------------------------------------------------------------------------
@pytest.mark.parametrize("platform", ["azureml", "databricks-azure"])
def test_azure_vm_sizes_are_case_insensitive(platform: str) -> None:
    for spelled in ("STANDARD_NC4AS_T4_V3", "standard_nc4as_t4_v3", "Standard_NC4as_T4_v3"):
        got = resolve(platform, machine_type=spelled, gpu=None, gpu_count=None)
        assert got == ResolvedMachine("Standard_NC4as_T4_v3", "T4", 1), spelled
    # A size the catalog does not know goes through as written: Azure reads it in any case.
    assert resolve(platform, machine_type="STANDARD_D4S_V3", gpu=None, gpu_count=None).machine_type == "STANDARD_D4S_V3"


def test_v100_maps_on_databricks_on_azure_as_on_azure_ml() -> None:
    for platform in ("azureml", "databricks-azure"):
        assert resolve(platform, machine_type=None, gpu="V100", gpu_count=2).machine_type == "Standard_NC12s_v3"
        assert resolve(platform, machine_type="Standard_NC12s_v3", gpu=None, gpu_count=None).gpu_count == 2


@pytest.mark.parametrize("name", ["K80", "NVIDIA_TESLA_K80", "tesla_k80"])
def test_a_retired_gpu_says_since_when_and_what_to_use(name: str) -> None:
    with pytest.raises(CatalogError) as caught:
        resolve("vertex", machine_type=None, gpu=name, gpu_count=1)
    assert "retired" in caught.value.problem.message
    assert "2024-05-01" in caught.value.problem.message
    assert "T4" in caught.value.problem.fix
    assert catalog.retired_gpu("P4") is None  # still offered by Compute Engine


def test_a_retired_gpu_in_a_job_file_is_refused_with_the_reason() -> None:
    from crosstrain.errors import SpecError
    from crosstrain.loader import job_from_dict

    for machine in ("NVIDIA_TESLA_K80", "K80:2", {"accelerator": {"type": "K80", "count": 1}}):
        with pytest.raises(SpecError) as caught:
            job_from_dict({"name": "j", "image": "i:1", "command": "python -m t", "primary": {"machine": machine}})
        (problem,) = caught.value.problems
        assert problem.path == "primary.machine.accelerator.type"
        assert "retired" in problem.message
        assert "T4" in problem.fix


@pytest.mark.parametrize("platform", [p for p in catalog.PLATFORMS if p != "aiplatform"])
def test_a_scale_tier_is_refused_on_every_platform_but_ai_platform(platform: str) -> None:
    with pytest.raises(CatalogError) as caught:
        resolve(platform, machine_type="BASIC_GPU", gpu=None, gpu_count=None, path="primary.machine")
    assert caught.value.problem.path == "primary.machine.type"
    assert "scale tier of AI Platform Training" in caught.value.problem.message
    assert "--target aiplatform" in caught.value.problem.fix
