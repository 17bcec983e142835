"""What a Vertex AI target is configured with, the pre-built training containers, and Reduction Server sizing."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import field_validator

from crosstrain.backends._google import (
    StagingBucket,
)
from crosstrain.environments import Runtime, Runtimes
from crosstrain.records import JobState
from crosstrain.settings import TargetSettings, setting

if TYPE_CHECKING:
    pass


STATE_MAP = {
    "JOB_STATE_UNSPECIFIED": JobState.UNKNOWN,
    "JOB_STATE_QUEUED": JobState.QUEUED,
    "JOB_STATE_PENDING": JobState.QUEUED,
    "JOB_STATE_PAUSED": JobState.QUEUED,
    "JOB_STATE_RUNNING": JobState.RUNNING,
    "JOB_STATE_UPDATING": JobState.RUNNING,
    "JOB_STATE_SUCCEEDED": JobState.SUCCEEDED,
    "JOB_STATE_PARTIALLY_SUCCEEDED": JobState.FAILED,
    "JOB_STATE_FAILED": JobState.FAILED,
    "JOB_STATE_EXPIRED": JobState.FAILED,
    "JOB_STATE_CANCELLING": JobState.CANCELLING,
    "JOB_STATE_CANCELLED": JobState.CANCELLED,
}
#: States of a job that no longer holds its identity: duplicates crosstrain cancelled, or a job the user
#: cancelled to free the identity.
_CANCELLED = frozenset({"JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"})
#: Vertex AI's regional API hosts: the only place a handle or a request from a file may send Google credentials.
_GOOGLE_HOST = re.compile(r"[a-z]+(?:-[a-z0-9]+)+-aiplatform(?:\.mtls)?\.googleapis\.com")
#: A host name, with a port or not: what a Vertex handle names as its endpoint.
_BARE_HOST = re.compile(r"[A-Za-z0-9.-]+(?::[0-9]+)?")

#: Vertex AI's regions: those with a regional endpoint in the aiplatform v1 discovery document (google-api-python-
#: client 2.202.0, rev 20261106), less the `us` and `eu` multi-regions. A region not listed is allowed, with a note.
REGIONS = (
    "africa-south1",
    "asia-east1",
    "asia-east2",
    "asia-northeast1",
    "asia-northeast2",
    "asia-northeast3",
    "asia-south1",
    "asia-south2",
    "asia-southeast1",
    "asia-southeast2",
    "asia-southeast3",
    "australia-southeast1",
    "australia-southeast2",
    "europe-central2",
    "europe-north1",
    "europe-north2",
    "europe-southwest1",
    "europe-west1",
    "europe-west10",
    "europe-west12",
    "europe-west15",
    "europe-west2",
    "europe-west3",
    "europe-west4",
    "europe-west6",
    "europe-west8",
    "europe-west9",
    "me-central1",
    "me-central2",
    "me-west1",
    "northamerica-northeast1",
    "northamerica-northeast2",
    "southamerica-east1",
    "southamerica-west1",
    "us-central1",
    "us-central2",
    "us-east1",
    "us-east4",
    "us-east5",
    "us-east7",
    "us-south1",
    "us-west1",
    "us-west2",
    "us-west3",
    "us-west4",
    "us-west8",
)

# ---- Dynamic Workload Scheduler (strategy FLEX_START, what scheduling.max_wait asks for) ------------------------
#: Its requirements (https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws, "Requirements"): the job
#: requests L4, A100, H100, H200 or B200 GPUs, its timeout is at most 7 days, and every worker pool has the same
#: machine configuration. B200 is not in crosstrain's catalog; H100-MEGA is an H100.
DWS_GPUS = ("L4", "A100", "A100-80GB", "H100", "H100-MEGA", "H200")
DWS_GPU_NAMES = "L4, A100, H100, H200 and B200"
DWS_MAX_TIMEOUT_S = 7 * 24 * 3600

REDUCTION_SERVER_IMAGE = "{geo}-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"

# Region prefix -> the reduction-server image's multi-region (the docs: "pick the multi-region nearest").
_NEAREST_GEO = (
    (("europe-", "me-", "africa-"), "europe"),
    (("asia-", "australia-"), "asia"),
)

# ---- Pre-built PyTorch training containers (executor images of a pythonPackageSpec) ----------------------
#: `{geo}` is the multi-region nearest the job's region (us, europe, asia). Source: the URI shape and the images
#: below are those of https://cloud.google.com/vertex-ai/docs/training/pre-built-containers as seen in public
#: code and google-cloud-aiplatform 2.7.0 (`google/cloud/aiplatform/jobs.py`, the prebuilt-image check). The
#: official list was not in reach: which release is newest is UNVERIFIED (2.5 was seen for GPUs only), so the
#: table is overridable with targets.vertex.environment.
PREBUILT = "{geo}-docker.pkg.dev/vertex-ai/training/"
RUNTIMES = Runtimes(
    "Vertex AI",
    (
        Runtime(
            "2.5",
            PREBUILT + "pytorch-gpu.2-5.py310:latest",
            None,  # no CPU image of 2.5 was seen: UNVERIFIED
            "https://cloud.google.com/vertex-ai/docs/training/pre-built-containers (UNVERIFIED: seen in public code)",
        ),
        Runtime(
            "2.4",
            PREBUILT + "pytorch-gpu.2-4.py310:latest",
            PREBUILT + "pytorch-cpu.2-4.py310:latest",
            "https://cloud.google.com/vertex-ai/docs/training/pre-built-containers",
        ),
    ),
    "targets.vertex.environment (an executor image URI)",
)

# ---- Reduction Server sizing -------------------------------------------------------------------------------
# Maximum egress bandwidth per node, in Gbps. Sources:
#   [vertex] https://cloud.google.com/vertex-ai/docs/training/distributed-training#reduce_training_time_with_reduction_server
#            (seed 004): n1-highmem-96 + 8 x V100 = 100 Gbps; n1-highcpu-16 = 32 Gbps.
#   [gpu-bw] https://cloud.google.com/compute/docs/gpus/gpu-network-bandwidth : A2/G2 up to 100 Gbps by machine
#            type; A3 High 1,000, A3 Mega 1,800, A3 Ultra 3,600; N1 + P100/P4 32; N1 + T4/V100 up to 100 by GPU
#            and vCPU count. Per machine type figures below A2/G2/N1 maxima are from the same page, as recorded
#            when this was written (UNVERIFIED).
#   [egress] https://cloud.google.com/compute/docs/network-bandwidth : general-purpose VMs get 2 Gbps per vCPU,
#            at most 32 Gbps without Tier_1 networking (N1/N2 with >= 16 vCPUs: 32 Gbps).
GPU_MACHINE_EGRESS_GBPS: Mapping[str, int] = {
    "a2-highgpu-1g": 24,
    "a2-highgpu-2g": 32,
    "a2-highgpu-4g": 50,
    "a2-highgpu-8g": 100,
    "a2-megagpu-16g": 100,
    "a2-ultragpu-1g": 24,
    "a2-ultragpu-2g": 32,
    "a2-ultragpu-4g": 50,
    "a2-ultragpu-8g": 100,
    "a3-highgpu-8g": 1000,
    "a3-megagpu-8g": 1800,
    "a3-ultragpu-8g": 3600,
    "g2-standard-4": 10,
    "g2-standard-8": 16,
    "g2-standard-12": 16,
    "g2-standard-16": 32,
    "g2-standard-24": 32,
    "g2-standard-32": 32,
    "g2-standard-48": 50,
    "g2-standard-96": 100,
}
#: N1 machines with attached GPUs: (GPU kind, GPUs per node) -> Gbps. P100 is 32 at any count.
N1_GPU_EGRESS_GBPS: Mapping[tuple[str, int], int] = {
    ("V100", 1): 24,
    ("V100", 2): 32,
    ("V100", 4): 50,
    ("V100", 8): 100,
    ("P100", 1): 32,
    ("P100", 2): 32,
    ("P100", 4): 32,
}
#: CPU machine families whose egress is 2 Gbps per vCPU up to 32 Gbps.
_CPU_FAMILIES = ("n1-", "n2-", "n2d-", "c2-", "c2d-")
_CPU_MAX_GBPS = 32


def egress_gbps(machine_type: str, gpu: str | None = None, gpu_count: int = 0) -> int | None:
    """A node's maximum egress bandwidth in Gbps, or None where crosstrain's table has no figure."""
    if machine_type in GPU_MACHINE_EGRESS_GBPS:
        return GPU_MACHINE_EGRESS_GBPS[machine_type]
    if gpu:
        return N1_GPU_EGRESS_GBPS.get((gpu, gpu_count)) if machine_type.startswith("n1-") else None
    vcpus = re.fullmatch(r"[a-z0-9]+-[a-z]+-(\d+)", machine_type)
    if machine_type.startswith(_CPU_FAMILIES) and vcpus:
        return min(2 * int(vcpus.group(1)), _CPU_MAX_GBPS)
    return None


class VertexSettings(TargetSettings):
    project: str = setting(
        description="Google Cloud project that runs the job.",
        env=("CLOUDSDK_CORE_PROJECT", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT"),
    )
    region: str = setting(
        "us-central1",
        description="Vertex AI region; the job is created on that region's endpoint.",
        env=("CLOUDSDK_AI_REGION", "GOOGLE_CLOUD_REGION"),
    )
    service_account: str | None = setting(
        None, description="Service account the job runs as; overrides the job's `identity`."
    )
    network: str | None = setting(
        None,
        description="VPC to peer with, projects/{project number}/global/networks/{name}; overrides `network`.",
    )
    base_output_dir: str | None = setting(
        None, description="gs:// prefix for AIP_MODEL_DIR and friends; overrides the job's `output_dir`."
    )
    staging_bucket: StagingBucket = setting(
        None,
        description="gs://BUCKET[/PREFIX] the job's `code` is uploaded to (as one content-addressed sdist).",
        env=("CROSSTRAIN_STAGING_BUCKET",),
    )
    environment: str | None = setting(
        None,
        description="A pre-built training container (executor image URI) to run the job's code on; overrides "
        "the job's `environment`.",
    )

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        # The region becomes part of the endpoint's host name, so a typo must not become a request elsewhere.
        if not re.fullmatch(r"[a-z]+(-[a-z0-9]+)+", value):
            raise ValueError(f"{value!r} is not a Google Cloud region; use one such as us-central1 or europe-west4")
        return value
