"""The accelerator catalog: portable GPU kinds -> each platform's machine types and accelerator names.

One data table (`OFFERS`) says, per platform and GPU kind, which machine types carry how many GPUs and what
the platform calls the accelerator. `resolve()` turns a spec's machine into a platform's machine, refusing the
pairings the table knows to be impossible and passing unknown machine types through untouched.

Sources are data: every `Offer` carries a `Source` (the documentation page it was read from, and the date it
was read): the accelerator enums (Vertex AI's MachineSpec; AI Platform's AcceleratorConfig, whose enum stops at
NVIDIA_TESLA_A100), Azure's GPU VM sizes (`r` = InfiniBand), Databricks' GPU node types per cloud. N1 GPU counts
follow Compute Engine's "GPUs on N1" table.

Checked on 2026-11-26 against each platform's own GPU list where it could be read (H200, B200, L4, L40S, MI300X;
Vertex's custom-training GPU table could not be: see the Google block below). Left out, and why:

* AMD MI300X (Azure `Standard_ND96isr_MI300X_v5`): crosstrain's runtime and images are CUDA-only. Azure ML's GPU
  environment is a CUDA build (AzureML-acpt-pytorch-...-cuda12.6), the local backend counts GPUs through the NVIDIA
  driver, and the runtime's NCCL advice and device binding were never run on ROCm/RCCL. Resolving `MI300X:8` would
  hand out a machine the rendered job cannot use, so it stays an unknown GPU until the runtime supports ROCm.
* GB200 (Vertex `a4x-highgpu-4g`, Azure ND GB200 v6): an ARM (Grace) host, so every image must be an arm64 build;
  crosstrain's default environments are x86-64. A machine type passes through when named explicitly.
* RTX PRO 6000 (Compute Engine G4): in Vertex's v1 accelerator enum, but not in a training-docs list read here.
* Databricks: no H200, B200 or MI300X node types on any cloud. Azure Databricks lists no ND A100 80 GB (ND96amsr,
  so `A100-80GB:8` is refused there) and no ND H200 v5; Databricks on Google Cloud has A2, A3 High and G2 only.
* AI Platform Training (legacy, shut down 2025-01-31): its enum ends at NVIDIA_TESLA_A100; nothing newer is added.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import field, replace
from typing import Any

from crosstrain.errors import Problem
from crosstrain.frozen import frozen

#: Platforms the catalog knows. Databricks is split by the cloud its workspace runs on.
PLATFORMS = (
    "vertex",
    "aiplatform",
    "azureml",
    "databricks-aws",
    "databricks-azure",
    "databricks-gcp",
    "databricks-air",
)


@frozen
class GpuKind:
    """A portable GPU kind, the name job files use (`A100:8`)."""

    name: str
    description: str
    aliases: tuple[str, ...] = ()


GPU_KINDS: tuple[GpuKind, ...] = (
    GpuKind("T4", "NVIDIA T4 16 GB", ("TESLA_T4", "NVIDIA_TESLA_T4")),
    GpuKind("P100", "NVIDIA P100 16 GB", ("TESLA_P100", "NVIDIA_TESLA_P100")),
    GpuKind("V100", "NVIDIA V100 16/32 GB", ("TESLA_V100", "NVIDIA_TESLA_V100")),
    GpuKind("A10G", "NVIDIA A10G 24 GB (AWS) / A10 24 GB (Azure)", ("A10",)),
    GpuKind("L4", "NVIDIA L4 24 GB", ("NVIDIA_L4",)),
    GpuKind("L40S", "NVIDIA L40S 48 GB", ("NVIDIA_L40S",)),
    GpuKind("A100", "NVIDIA A100 40 GB", ("A100-40GB", "A100_40GB", "TESLA_A100", "NVIDIA_TESLA_A100")),
    GpuKind("A100-80GB", "NVIDIA A100 80 GB", ("A100_80GB", "NVIDIA_A100_80GB")),
    GpuKind("H100", "NVIDIA H100 80 GB (SXM)", ("H100-80GB", "H100_80GB", "NVIDIA_H100_80GB")),
    GpuKind("H100-MEGA", "NVIDIA H100 80 GB on Google A3 Mega", ("H100_MEGA", "NVIDIA_H100_MEGA_80GB")),
    GpuKind("H100-NVL", "NVIDIA H100 NVL 94 GB (PCIe)", ("H100_NVL",)),
    GpuKind("H200", "NVIDIA H200 141 GB", ("H200-141GB", "H200_141GB", "NVIDIA_H200_141GB")),
    GpuKind("B200", "NVIDIA B200 180 GB", ("NVIDIA_B200",)),
    GpuKind("B300", "NVIDIA B300 288 GB", ("NVIDIA_B300",)),
)


@frozen
class ScaleTier:
    """One of AI Platform Training's predefined cluster shapes (`trainingInput.scaleTier`), named as the primary's
    machine on that target. `gpus`: the GPUs of the one machine of a single-machine tier. `single`: the tier is
    one machine; otherwise the service picks the number of workers and parameter servers itself."""

    name: str
    description: str
    single: bool
    gpus: int = 0
    tpu: bool = False


#: Source: the enum `TrainingInput.scaleTier` of the ml v1 discovery document (enumDescriptions), as bundled with
#: google-api-python-client; https://cloud.google.com/ai-platform/training/docs/machine-types. The API gives no
#: worker or parameter-server counts for STANDARD_1 and PREMIUM_1: the service chooses them.
SCALE_TIERS: Mapping[str, ScaleTier] = {
    tier.name: tier
    for tier in (
        ScaleTier("BASIC", "a single machine, no GPU", single=True),
        ScaleTier("BASIC_GPU", "a single machine with one GPU", single=True, gpus=1),
        ScaleTier("BASIC_TPU", "a single machine with a Cloud TPU", single=True, tpu=True),
        ScaleTier("STANDARD_1", "a master, many workers and a few parameter servers (CPU)", single=False),
        ScaleTier("PREMIUM_1", "a master, a large number of workers and many parameter servers (CPU)", single=False),
    )
}


def scale_tier_problem(machine_type: str | None, platform: str, path: str) -> Problem | None:
    """A scale tier named as a machine on a platform other than AI Platform Training: refused with the reason."""
    if machine_type not in SCALE_TIERS or platform == "aiplatform":
        return None
    return Problem(
        f"{path}.type",
        f"{machine_type} is a scale tier of AI Platform Training (a predefined cluster), not a machine of {platform}",
        "use --target aiplatform, or name GPUs (e.g. `machine: T4:1`) or a machine type of this target",
    )


def scale_tier_problems(pools: Iterable[Any], platform: str) -> list[Problem]:
    """`scale_tier_problem` for every pool (`PoolView`s) that names a machine, each field once."""
    found = (
        scale_tier_problem(pool.machine.type, platform, pool.machine_path) for pool in pools if pool.machine is not None
    )
    return list(dict.fromkeys(p for p in found if p is not None))


@frozen
class Source:
    """Where an offer was read: a documentation URL, and the ISO date read."""

    where: str
    read: str


@frozen
class Offer:
    """How one platform offers one GPU kind.

    `machines` maps a GPU count to the machine types that carry exactly that many (the first is the default).
    `family` is set where any machine type with that prefix can carry the GPU in `family_counts` (Google N1).
    `sources`: where the offer was read, and when (every offer has at least one).
    """

    accelerator: str | None = None
    machines: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    family: str | None = None
    family_counts: Mapping[int, str] = field(default_factory=dict)
    note: str = ""
    sources: tuple[Source, ...] = ()

    def counts(self) -> list[int]:
        return sorted({*self.machines, *self.family_counts})


# -- Google: Vertex AI custom training, AI Platform Training, Databricks on Google Cloud ----------------------------
#: The accelerator names: the v1 `AcceleratorType` enum (google.md 1.4, from aiplatform.v1.json rev 20261106; the
#: REST reference lists the same). Which machine type carries which GPU: Compute Engine's GPU machine-types page
#: (A4 = B200, A3 Ultra = H200). Vertex names a4-highgpu-8g and a3-ultragpu-8g, 8 GPUs a node, among its training
#: machines on its training-clusters compute page; its custom-training GPU table was not in reach on 2026-11-26.
_READ = "2026-11-26"  # the day the sources below were read for issue 24 (finding 11)
_VERTEX_ENUM = (
    Source("https://cloud.google.com/vertex-ai/docs/reference/rest/v1/MachineSpec#acceleratortype", _READ),
    Source("https://cloud.google.com/vertex-ai/docs/reference/rest/v1/MachineSpec", _READ),
)
_GCE_GPUS = Source("https://cloud.google.com/compute/docs/gpus", _READ)
_VERTEX_TRAINING_MACHINES = Source(
    "https://docs.cloud.google.com/vertex-ai/docs/training/training-clusters/compute-resources", _READ
)
_GOOGLE = (*_VERTEX_ENUM, _GCE_GPUS)


def _google_accelerator_optimized() -> dict[str, Offer]:
    """The A- and G-series (A2, A3, A4, G2): each machine type carries a fixed number of one GPU."""
    return {
        "A100": Offer(
            "NVIDIA_TESLA_A100",
            {
                1: ("a2-highgpu-1g",),
                2: ("a2-highgpu-2g",),
                4: ("a2-highgpu-4g",),
                8: ("a2-highgpu-8g",),
                16: ("a2-megagpu-16g",),
            },
            sources=_GOOGLE,
        ),
        "A100-80GB": Offer(
            "NVIDIA_A100_80GB",
            {1: ("a2-ultragpu-1g",), 2: ("a2-ultragpu-2g",), 4: ("a2-ultragpu-4g",), 8: ("a2-ultragpu-8g",)},
            sources=_GOOGLE,
        ),
        "L4": Offer(
            "NVIDIA_L4",
            {
                1: ("g2-standard-8", "g2-standard-4", "g2-standard-12", "g2-standard-16", "g2-standard-32"),
                2: ("g2-standard-24",),
                4: ("g2-standard-48",),
                8: ("g2-standard-96",),
            },
            sources=_GOOGLE,
        ),
        "H100": Offer(
            "NVIDIA_H100_80GB",
            {1: ("a3-highgpu-1g",), 2: ("a3-highgpu-2g",), 4: ("a3-highgpu-4g",), 8: ("a3-highgpu-8g",)},
            sources=_GOOGLE,
        ),
        "H100-MEGA": Offer("NVIDIA_H100_MEGA_80GB", {8: ("a3-megagpu-8g",)}, sources=_GOOGLE),
        "H200": Offer(
            "NVIDIA_H200_141GB",
            {8: ("a3-ultragpu-8g",)},
            sources=(*_GOOGLE, _VERTEX_TRAINING_MACHINES),
        ),
        "B200": Offer(
            "NVIDIA_B200",
            {8: ("a4-highgpu-8g",)},
            sources=(*_GOOGLE, _VERTEX_TRAINING_MACHINES),
        ),
    }


def _google_n1() -> dict[str, Offer]:
    n1 = Source("https://cloud.google.com/compute/docs/gpus (GPUs on N1)", _READ)
    return {
        "T4": Offer(
            "NVIDIA_TESLA_T4",
            family="n1-",
            family_counts={1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32"},
            sources=(*_VERTEX_ENUM, n1),
        ),
        "P100": Offer(
            "NVIDIA_TESLA_P100",
            family="n1-",
            family_counts={1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32"},
            sources=(*_VERTEX_ENUM, n1),
        ),
        "V100": Offer(
            "NVIDIA_TESLA_V100",
            family="n1-",
            family_counts={1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32", 8: "n1-highmem-96"},
            sources=(*_VERTEX_ENUM, n1),
        ),
    }


#: AI Platform Training's own enum (google.md 4, the ml v1 discovery document rev 20251213): NVIDIA_TESLA_{K80,
#: P100,V100,P4,T4,A100}. Nothing newer exists there.
_AIPLATFORM_ENUM = Source(
    "https://cloud.google.com/ai-platform/training/docs/reference/rest/v1/projects.jobs#AcceleratorConfig", _READ
)

# -- Azure ML: Azure VM sizes ---------------------------------------------------------------------------------------
#: azure.md 8 (from MicrosoftDocs/azure-compute-docs articles/virtual-machines/sizes/gpu-accelerated/*), which already
#: had ND H200 v5, NC A100 v4 and NC H100 v5. The ND family page also lists ND MI300X v5 (left out: see the top).
_AZURE_SIZES = (Source("https://learn.microsoft.com/en-us/azure/virtual-machines/sizes/overview", _READ),)

_AZURE = {
    "T4": Offer(
        machines={
            1: ("Standard_NC4as_T4_v3", "Standard_NC8as_T4_v3", "Standard_NC16as_T4_v3"),
            4: ("Standard_NC64as_T4_v3",),
        },
        sources=_AZURE_SIZES,
    ),
    "V100": Offer(
        machines={
            1: ("Standard_NC6s_v3",),
            2: ("Standard_NC12s_v3",),
            4: ("Standard_NC24rs_v3", "Standard_NC24s_v3"),
            8: ("Standard_ND40rs_v2",),
        },
        note="NC v3 sizes were retired by Azure on 2025-09-30",
        sources=_AZURE_SIZES,
    ),
    "A100": Offer(machines={8: ("Standard_ND96asr_v4",)}, sources=_AZURE_SIZES),
    "A100-80GB": Offer(
        machines={
            1: ("Standard_NC24ads_A100_v4",),
            2: ("Standard_NC48ads_A100_v4",),
            4: ("Standard_NC96ads_A100_v4",),
            8: ("Standard_ND96amsr_A100_v4",),
        },
        sources=_AZURE_SIZES,
    ),
    "H100": Offer(machines={8: ("Standard_ND96isr_H100_v5",)}, sources=_AZURE_SIZES),
    "H100-NVL": Offer(
        machines={1: ("Standard_NC40ads_H100_v5",), 2: ("Standard_NC80adis_H100_v5",)}, sources=_AZURE_SIZES
    ),
    "H200": Offer(machines={8: ("Standard_ND96isr_H200_v5",)}, sources=_AZURE_SIZES),
}

# -- Databricks, by the cloud its workspace runs on ----------------------------------------------------------------
_DATABRICKS_AWS_GPU = (Source("https://docs.databricks.com/aws/en/compute/gpu", _READ),)
_DATABRICKS_AZURE_GPU = (Source("https://learn.microsoft.com/en-us/azure/databricks/compute/gpu", _READ),)
_DATABRICKS_GCP_GPU = (
    Source("https://docs.databricks.com/gcp/en/compute/flexible-node-type-instances (GPU families a2, a3)", _READ),
)


def _on(offer: Offer, sources: tuple[Source, ...], machines: Mapping[int, tuple[str, ...]] | None = None) -> Offer:
    """Another service's copy of an offer: the machine types it lists (default: all), its own sources."""
    return Offer(machines=offer.machines if machines is None else machines, note=offer.note, sources=sources)


#: Azure Databricks lists NCads H100 v5, ND H100 v5, NC A100 v4, ND A100 v4 (40 GB), NVads A10 v5 and NC T4 v3;
#: no ND A100 80 GB (ND96amsr) and no ND H200 v5. It runs the retired NC v3 (V100) sizes no longer, but they stay
#: (as on Azure ML) with Azure's retirement note, so `V100:2` is `Standard_NC12s_v3` on both.
_DATABRICKS_AZURE = {
    "T4": _on(_AZURE["T4"], _DATABRICKS_AZURE_GPU),
    "V100": _on(_AZURE["V100"], _DATABRICKS_AZURE_GPU),
    "A10G": Offer(
        machines={1: ("Standard_NV36ads_A10_v5", "Standard_NV36adms_A10_v5"), 2: ("Standard_NV72ads_A10_v5",)},
        note="NVIDIA A10 (Azure's name for the A10G's sibling); an older Databricks page says multi-GPU PyTorch 2.0+ "
        "does not work on it",
        sources=_DATABRICKS_AZURE_GPU,
    ),
    "A100": _on(_AZURE["A100"], _DATABRICKS_AZURE_GPU),
    "A100-80GB": _on(
        _AZURE["A100-80GB"],
        _DATABRICKS_AZURE_GPU,
        {n: m for n, m in _AZURE["A100-80GB"].machines.items() if n != 8},
    ),
    "H100": _on(_AZURE["H100"], _DATABRICKS_AZURE_GPU),
    "H100-NVL": _on(_AZURE["H100-NVL"], _DATABRICKS_AZURE_GPU),
}

#: Databricks on AWS lists P5 (H100), P4d/P4de (A100), G6e (L40S), G6 (L4), G5 (A10G), G4dn (T4) and P3 (V100,
#: being retired).
_DATABRICKS_AWS = {
    "T4": Offer(
        machines={
            1: ("g4dn.xlarge", "g4dn.2xlarge", "g4dn.4xlarge", "g4dn.8xlarge", "g4dn.16xlarge"),
            4: ("g4dn.12xlarge",),
        },
        sources=_DATABRICKS_AWS_GPU,
    ),
    "V100": Offer(
        machines={1: ("p3.2xlarge",), 4: ("p3.8xlarge",), 8: ("p3.16xlarge",)},
        note="p3 instances are being retired",
        sources=_DATABRICKS_AWS_GPU,
    ),
    "A10G": Offer(
        machines={
            1: ("g5.xlarge", "g5.2xlarge", "g5.4xlarge", "g5.8xlarge", "g5.16xlarge"),
            4: ("g5.12xlarge", "g5.24xlarge"),
            8: ("g5.48xlarge",),
        },
        sources=_DATABRICKS_AWS_GPU,
    ),
    "L4": Offer(
        machines={
            1: ("g6.xlarge", "g6.2xlarge", "g6.4xlarge", "g6.8xlarge", "g6.16xlarge"),
            4: ("g6.12xlarge", "g6.24xlarge"),
            8: ("g6.48xlarge",),
        },
        sources=_DATABRICKS_AWS_GPU,
    ),
    "L40S": Offer(
        machines={
            1: ("g6e.xlarge", "g6e.2xlarge", "g6e.4xlarge", "g6e.8xlarge", "g6e.16xlarge"),
            4: ("g6e.12xlarge", "g6e.24xlarge"),
            8: ("g6e.48xlarge",),
        },
        sources=_DATABRICKS_AWS_GPU,
    ),
    "A100": Offer(machines={8: ("p4d.24xlarge",)}, sources=_DATABRICKS_AWS_GPU),
    "A100-80GB": Offer(machines={8: ("p4de.24xlarge",)}, sources=_DATABRICKS_AWS_GPU),
    "H100": Offer(machines={8: ("p5.48xlarge",)}, sources=_DATABRICKS_AWS_GPU),
}

_DATABRICKS_GCP = {
    k: _on(v, _DATABRICKS_GCP_GPU)
    for k, v in _google_accelerator_optimized().items()
    if k in ("A100", "A100-80GB", "H100", "L4")
}


# -- Databricks AI Runtime (serverless GPU): the accelerator types of `ComputeSpec.accelerator_type` -----------------
#: databricks-sdk's `jobs.ComputeSpecAcceleratorType` (GPU_1xA10, GPU_1xH100, GPU_8xH100, GPU_8xB300), per node;
#: the `databricks air` CLI accepts the first three. Which a workspace offers varies by cloud and region.
_AIR_SOURCES = (
    Source("https://github.com/databricks/databricks-sdk-py (databricks/sdk/service/jobs.py)", "2026-11-26"),
    Source("https://docs.databricks.com/aws/en/machine-learning/ai-runtime/cli/yaml-config", "2026-11-26"),
)
_DATABRICKS_AIR = {
    "A10G": Offer(machines={1: ("GPU_1xA10",)}, note="NVIDIA A10 24 GB, one per node", sources=_AIR_SOURCES),
    "H100": Offer(machines={1: ("GPU_1xH100",), 8: ("GPU_8xH100",)}, sources=_AIR_SOURCES),
    "B300": Offer(
        machines={8: ("GPU_8xB300",)},
        note="in databricks-sdk's enum only, not in the air CLI's list: availability unconfirmed",
        sources=_AIR_SOURCES,
    ),
}


def _aiplatform(offer: Offer) -> Offer:
    """A Vertex offer as AI Platform Training has it: the same machines, named by the legacy enum."""
    return replace(offer, sources=(_AIPLATFORM_ENUM, *offer.sources[len(_VERTEX_ENUM) :]))


#: The table: platform -> portable GPU kind -> offer.
OFFERS: Mapping[str, Mapping[str, Offer]] = {
    "vertex": {**_google_n1(), **_google_accelerator_optimized()},
    "aiplatform": {
        **{k: _aiplatform(v) for k, v in _google_n1().items()},
        "A100": _aiplatform(_google_accelerator_optimized()["A100"]),
    },
    "azureml": _AZURE,
    "databricks-aws": _DATABRICKS_AWS,
    "databricks-azure": _DATABRICKS_AZURE,
    "databricks-gcp": _DATABRICKS_GCP,
    "databricks-air": _DATABRICKS_AIR,
}


@frozen
class RetiredGpu:
    """A GPU kind the clouds no longer offer: named in job files still, and refused with what to use."""

    name: str
    aliases: tuple[str, ...]
    retired: str
    replacement: str
    source: str


#: Source for K80: the AcceleratorType enum of google-cloud-aiplatform (aiplatform_v1) marks NVIDIA_TESLA_K80
#: "Deprecated: ... has reached end of support", pointing to https://cloud.google.com/compute/docs/eol/k80-eol;
#: the date is that page's (UNVERIFIED: the page itself was not in reach, the date is as recalled from it). P4 and
#: P100 are still offered (https://cloud.google.com/compute/docs/gpus lists them as generally available).
RETIRED_GPUS: tuple[RetiredGpu, ...] = (
    RetiredGpu(
        "K80",
        ("TESLA_K80", "NVIDIA_TESLA_K80"),
        "2024-05-01",
        "T4",
        "https://cloud.google.com/compute/docs/eol/k80-eol",
    ),
)


def retired_gpu(name: str) -> RetiredGpu | None:
    """The retired GPU kind `name` spells, if it is one."""
    key = name.upper().replace("_", "-")
    return next(
        (r for r in RETIRED_GPUS if key in {n.upper().replace("_", "-") for n in (r.name, *r.aliases)}),
        None,
    )


def unknown_gpu(name: str) -> tuple[str, str]:
    """The message and the fix for a GPU name the catalog does not offer: a retired one says since when."""
    retired = retired_gpu(name)
    if retired is not None:
        return (
            f"{name!r} is retired: Google Cloud (Vertex AI, AI Platform) ended support for {retired.name} on "
            f"{retired.retired} ({retired.source}), and no other target offers it",
            f"use {retired.replacement} (e.g. `machine: {retired.replacement}:1`)",
        )
    return f"unknown GPU {name!r}", f"use one of {', '.join(gpu_names())}"


#: What each platform's machine types look like, to catch one platform's name used on another.
_MACHINE_PATTERNS: Mapping[str, tuple[str, str]] = {
    "vertex": (r"[a-z][a-z0-9]*(-[a-z0-9]+)+", "a Compute Engine machine type such as n1-standard-8"),
    "aiplatform": (r"[a-z][a-z0-9]*([-_][a-z0-9]+)+", "a Compute Engine machine type such as n1-standard-8"),
    "azureml": (r"(?i:standard)_[A-Za-z0-9_]+", "an Azure VM size such as Standard_ND96asr_v4"),
    "databricks-aws": (r"[a-z][a-z0-9-]*\.[a-z0-9]+", "an AWS instance type such as g5.12xlarge"),
    "databricks-azure": (r"(?i:standard)_[A-Za-z0-9_]+", "an Azure VM size such as Standard_NC24ads_A100_v4"),
    "databricks-gcp": (r"[a-z][a-z0-9]*(-[a-z0-9]+)+", "a Compute Engine machine type such as a2-highgpu-1g"),
    "databricks-air": (r"GPU_\d+x[A-Za-z0-9]+", "an AI Runtime accelerator type such as GPU_8xH100"),
}

_BY_NAME: dict[str, str] = {}
for _kind in GPU_KINDS:
    for _name in (_kind.name, *_kind.aliases):
        _BY_NAME[_name.upper().replace("_", "-")] = _kind.name


def canonical_gpu(name: str) -> str | None:
    """The portable kind for a GPU name or alias (`nvidia_tesla_a100` -> `A100`), or None if unknown."""
    return _BY_NAME.get(name.strip().upper().replace("_", "-"))


def gpu_names() -> list[str]:
    return [k.name for k in GPU_KINDS]


@frozen
class ResolvedMachine:
    """A pool's machine on one platform. `gpu` is the portable kind; `accelerator` the platform's own name."""

    machine_type: str | None
    gpu: str | None = None
    gpu_count: int = 0
    accelerator: str | None = None

    @property
    def infiniband(self) -> bool:
        """Azure marks RDMA/InfiniBand VM sizes with an `r` in the size's capability letters."""
        if not self.machine_type or not self.machine_type.startswith("Standard_"):
            return False
        letters = re.match(r"Standard_[A-Z]+\d+([a-z]*)", self.machine_type)
        return bool(letters and "r" in letters.group(1))


@functools.cache
def _fixed_index(platform: str) -> dict[str, tuple[str, int]]:
    """machine type -> (gpu kind, count) for machine types that fix their GPU count."""
    index: dict[str, tuple[str, int]] = {}
    for gpu, offer in OFFERS[platform].items():
        for count, types in offer.machines.items():
            for machine_type in types:
                index[machine_type] = (gpu, count)
    return index


@functools.cache
def _families(platform: str) -> set[str]:
    """Machine-type prefixes the catalog knows for a platform (a2-highgpu-, n1-, Standard_ND96...)."""
    prefixes = {o.family for o in OFFERS[platform].values() if o.family}
    for machine_type in _fixed_index(platform):
        prefixes.add(machine_type.rsplit("-", 1)[0] + "-" if "-" in machine_type else machine_type)
    return prefixes


def variants(kind: str) -> list[str]:
    """The catalog's kinds of one GPU, `kind` first: A100 and A100-80GB; H100, H100-MEGA and H100-NVL."""
    base = kind.split("-")[0]
    return [kind, *(k.name for k in GPU_KINDS if k.name != kind and k.name.split("-")[0] == base)]


def choices(platform: str, gpu: str | None = None) -> str:
    """Human list of valid choices, for error messages: with `gpu`, the machines of every variant of it the
    platform offers (A100:4 is no Azure size, A100-80GB:4 is)."""
    offers = OFFERS[platform]
    if gpu is None:
        return ", ".join(offers) or "none"
    parts = []
    for kind in (k for k in variants(gpu) if k in offers):
        offer = offers[kind]
        counts = offer.counts()
        parts += [f"{kind}:{n} ({', '.join(offer.machines.get(n, ()) or (offer.family_counts[n],))})" for n in counts]
        if offer.family:
            parts.append(f"or any {offer.family}* machine with {'/'.join(map(str, counts))} x {kind}")
    return "; ".join(parts)


def resolve(
    platform: str,
    *,
    machine_type: str | None,
    gpu: str | None,
    gpu_count: int | None,
    path: str = "machine",
) -> ResolvedMachine:
    """Resolve a machine for `platform`, or raise `CatalogError` with the valid choices.

    `gpu` may be a portable kind or any alias. An unknown machine type passes through unchanged (the platform
    has the last word); a known one must agree with the accelerator the spec asks for.
    """
    offers = OFFERS[platform]
    kind = canonical_gpu(gpu) if gpu else None
    tier = scale_tier_problem(machine_type, platform.split("-")[0], path)
    if tier is not None:
        raise CatalogError(tier)
    if gpu and kind is None:
        raise CatalogError(Problem(f"{path}.accelerator.type", *unknown_gpu(gpu)))
    if machine_type and platform in ("azureml", "databricks-azure"):
        machine_type = _azure_size(machine_type, platform)
    if machine_type:
        pattern, example = _MACHINE_PATTERNS[platform]
        if not re.fullmatch(pattern, machine_type):
            raise CatalogError(
                Problem(
                    f"{path}.type",
                    f"{machine_type!r} is not a {platform} machine type",
                    f"give {example}, or only a GPU (e.g. `machine: A100:8`) and let the catalog choose",
                )
            )
        fixed = _fixed_index(platform).get(machine_type)
        if fixed:
            fixed_kind, fixed_count = fixed
            if kind not in (None, fixed_kind) or gpu_count not in (None, fixed_count):
                wanted = kind or fixed_kind
                # The GPU asked for may be one this platform does not offer at all (H100-NVL on Vertex AI).
                elsewhere = f"{platform} offers no {wanted}; use one of {choices(platform)}"
                raise CatalogError(
                    Problem(
                        path,
                        f"{machine_type} carries {fixed_count} x {fixed_kind}, not {gpu_count or 1} x {wanted}",
                        "drop the accelerator, or "
                        + (f"pick from: {choices(platform, wanted)}" if wanted in offers else elsewhere),
                    )
                )
            return ResolvedMachine(machine_type, fixed_kind, fixed_count, offers[fixed_kind].accelerator)
        if kind is None:
            return ResolvedMachine(machine_type)
        offer = offers.get(kind)
        count = gpu_count or 1
        if offer and offer.family and machine_type.startswith(offer.family):
            if count not in offer.family_counts:
                raise CatalogError(
                    Problem(
                        f"{path}.accelerator.count",
                        f"{machine_type} cannot carry {count} x {kind}",
                        f"use a count of {', '.join(map(str, offer.counts()))}",
                    )
                )
            return ResolvedMachine(machine_type, kind, count, offer.accelerator)
        if offer is None and platform in ("vertex", "aiplatform"):
            raise CatalogError(_not_offered(platform, kind, path))
        if any(machine_type.startswith(f) for f in _families(platform)):
            raise CatalogError(
                Problem(
                    path,
                    f"{machine_type} cannot carry {kind} on {platform}",
                    f"pick from: {choices(platform, kind)}" if offer else _not_offered(platform, kind, path).fix,
                )
            )
        # A machine type the catalog has never heard of: trust the user, the platform has the last word.
        return ResolvedMachine(machine_type, kind, count, offer.accelerator if offer else None)
    if kind is None:
        if gpu_count:
            raise CatalogError(
                Problem(
                    f"{path}.accelerator.type",
                    "an accelerator count needs a GPU type",
                    f"add `type:` (one of {', '.join(gpu_names())})",
                )
            )
        return ResolvedMachine(None)
    offer = offers.get(kind)
    if offer is None:
        raise CatalogError(_not_offered(platform, kind, path))
    count = gpu_count or 1
    if count in offer.machines:
        return ResolvedMachine(offer.machines[count][0], kind, count, offer.accelerator)
    if count in offer.family_counts:
        return ResolvedMachine(offer.family_counts[count], kind, count, offer.accelerator)
    raise CatalogError(
        Problem(
            f"{path}.accelerator.count",
            f"{platform} has no machine with {count} x {kind}",
            f"pick from: {choices(platform, kind)}",
        )
    )


def _azure_size(machine_type: str, platform: str) -> str:
    """Azure VM sizes are case-insensitive: `STANDARD_NC4AS_T4_V3` is the catalog's `Standard_NC4as_T4_v3`."""
    return next((name for name in _fixed_index(platform) if name.lower() == machine_type.lower()), machine_type)


def _not_offered(platform: str, kind: str, path: str) -> Problem:
    return Problem(
        f"{path}.accelerator.type",
        f"{platform} does not offer {kind} in crosstrain's catalog",
        f"use one of {choices(platform)}, or name the machine type explicitly",
    )


class CatalogError(ValueError):
    """A machine the catalog knows to be impossible on a platform."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem
