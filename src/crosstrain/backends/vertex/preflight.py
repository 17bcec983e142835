"""What `crosstrain check` reads from Google Cloud for a Vertex AI job, read-only: the credentials and the
project against the regional job service (one page of `customJobs.list`), and the custom-training quota of the
job's GPUs and CPUs in its region from the Cloud Quotas API
(`GET cloudquotas.googleapis.com/v1/projects/{p}/locations/global/services/aiplatform.googleapis.com/quotaInfos`:
the limit per region in `dimensionsInfos`; spot, preemptible and DWS jobs count against the
`custom_model_training_preemptible_*` metrics). Cloud Quotas gives limits, not usage: a job within the limit
may still wait for GPUs others in the project hold, and a region may have no capacity (stockout): said, not
checked. Nothing is created.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from crosstrain.preflight import Check, Outcome, classify, enough, unchecked

if TYPE_CHECKING:
    from crosstrain.backends.vertex.plan import Plan
    from crosstrain.backends.vertex.settings import VertexSettings
    from crosstrain.spec import TrainingJob

SERVICE = "aiplatform.googleapis.com"
QUOTA_FIX = (
    "ask for more in the Google Cloud console (IAM & Admin > Quotas, metric {metric}, region {region}), "
    "or pick another region or fewer GPUs"
)
_BY_CLASS = {
    "PermissionDenied": Outcome.PERMISSION,
    "Forbidden": Outcome.PERMISSION,
    "Unauthenticated": Outcome.PERMISSION,
    "Unauthorized": Outcome.PERMISSION,
    "DefaultCredentialsError": Outcome.PERMISSION,
    "RefreshError": Outcome.PERMISSION,
    "NotFound": Outcome.NOT_FOUND,
}
CREDENTIALS_FIX = (
    "run `gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS), and grant the "
    "account roles/aiplatform.user on the project"
)


def outcome_of(error: BaseException) -> Outcome:
    for cls in type(error).__mro__:
        if cls.__name__ in _BY_CLASS:
            return _BY_CLASS[cls.__name__]
    text = str(error)
    if "credentials" in text.lower():
        return Outcome.PERMISSION
    return classify(getattr(error, "code", None) if isinstance(getattr(error, "code", None), int) else None, text)


def gpu_metrics(accelerator: str, spot: bool) -> list[str]:
    """The custom-training quota metrics an accelerator may count against, most likely first (Google names
    H100's `nvidia_h100_gpus` in some places and `nvidia_h100_80gb_gpus` in others)."""
    name = accelerator.lower().replace("nvidia_tesla_", "nvidia_")
    names = [name, re.sub(r"_\d+gb$", "", name)]
    kind = "preemptible_" if spot else ""
    return [f"{SERVICE}/custom_model_training_{kind}{n}_gpus" for n in dict.fromkeys(names)]


def cpu_metric(machine_type: str, spot: bool) -> tuple[str, int] | None:
    """The CPU quota metric of a general-purpose machine type and its vCPUs (`n1-standard-8`: 8); None where
    the type's name does not say its vCPUs (a2-highgpu-1g)."""
    match = re.fullmatch(r"(n1|n2|n2d|e2|c2|c2d|n4|c3)-[a-z]+-(\d+)", machine_type)
    if match is None:
        return None
    family = "c2_" if match[1] in ("c2", "c2d") else ""
    return f"{SERVICE}/custom_model_training_{'preemptible_' if spot else ''}{family}cpus", int(match[2])


class ReadError(Exception):
    """A read answered with an error status: `code` and the service's message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def read_pages(page: Callable[[str], tuple[int, Any]], key: str, max_pages: int = 20) -> list[Any]:
    """Every item under `key` of a paged Google list (`pageToken`, `nextPageToken`); `page(query)` gives the
    status and the JSON of one page. An error status raises `ReadError` with the service's message."""
    items: list[Any] = []
    token = ""
    for _ in range(max_pages):
        status, body = page("pageSize=500" + (f"&pageToken={token}" if token else ""))
        if status >= 400:
            error = body.get("error") if isinstance(body, dict) else None
            raise ReadError(status, str((error or {}).get("message") or body)[:300])
        items += body.get(key) or []
        token = str(body.get("nextPageToken") or "")
        if not token:
            break
    return items


def region_limit(info: dict[str, Any], region: str) -> float | None:
    """The limit a QuotaInfo sets in `region`: its own entry, else the one without a region (every other)."""
    default = None
    for entry in info.get("dimensionsInfos") or []:
        where = (entry.get("dimensions") or {}).get("region")
        value = (entry.get("details") or {}).get("value")
        if value is None:
            continue
        if where == region:
            return float(value)
        if where is None:
            default = float(value)
    return default


def checks(
    job: TrainingJob,
    settings: VertexSettings,
    plan: Plan,
    list_jobs: Callable[[str], Any],
    quota_infos: Callable[[str], list[dict[str, Any]]],
    staging: Callable[[], Check],
) -> list[Check]:
    """`list_jobs(parent)` reads one page of the project's jobs; `quota_infos(project)` the QuotaInfos of
    aiplatform.googleapis.com (raising an error whose class or text says why it could not); `staging()` reads
    the staging bucket."""
    parent = f"projects/{settings.project}/locations/{settings.region}"
    try:
        list_jobs(parent)
    except Exception as error:  # any failure of a read is a check's outcome, not a crash
        outcome = outcome_of(error)
        fixes = {
            Outcome.PERMISSION: CREDENTIALS_FIX,
            Outcome.NOT_FOUND: "set `project` to a project that exists, with the Vertex AI API enabled",
        }
        return [Check("project", outcome, _first(error), fixes.get(outcome, "retry, or check Google Cloud's status"))]
    found = [Check("project", Outcome.OK, f"Vertex AI in {settings.project} ({settings.region}) answers"), staging()]
    try:
        infos = quota_infos(settings.project)
    except Exception as error:  # any failure of a read is a check's outcome, not a crash
        outcome = outcome_of(error)
        fix = "grant cloudquotas.quotas.get (roles/cloudquotas.viewer) and enable cloudquotas.googleapis.com"
        return [*found, Check("quota", outcome, _first(error), fix if outcome is Outcome.PERMISSION else "retry")]
    by_metric = {str(info.get("metric")): info for info in infos}
    spot = job.scheduling.spot or job.scheduling.max_wait is not None  # DWS counts as preemptible too
    gpus: dict[str, int] = {}
    cpus: dict[str, int] = {}
    for pool in job.pools():
        planned = plan.pools.get(pool.role)
        if planned is None:
            continue
        machine = planned.machine
        if machine.accelerator and machine.gpu_count:
            gpus[machine.accelerator] = gpus.get(machine.accelerator, 0) + machine.gpu_count * pool.replicas
        cpu = cpu_metric(machine.machine_type, spot)
        if cpu is not None:
            cpus[cpu[0]] = cpus.get(cpu[0], 0) + cpu[1] * pool.replicas
    for accelerator, asked in gpus.items():
        metrics = gpu_metrics(accelerator, spot)
        metric = next((m for m in metrics if m in by_metric), None)
        if metric is None:
            found.append(unchecked("quota", f"Cloud Quotas lists none of {', '.join(metrics)}"))
            continue
        limit = region_limit(by_metric[metric], settings.region)
        fix = QUOTA_FIX.format(metric=metric.rsplit("/", 1)[-1], region=settings.region)
        found.append(enough("quota", asked, limit, None, f"{metric.rsplit('/', 1)[-1]} in {settings.region}", fix))
    for metric, asked in cpus.items():
        if metric in by_metric:
            limit = region_limit(by_metric[metric], settings.region)
            fix = QUOTA_FIX.format(metric=metric.rsplit("/", 1)[-1], region=settings.region)
            found.append(enough("quota", asked, limit, None, f"{metric.rsplit('/', 1)[-1]} in {settings.region}", fix))
    found.append(unchecked("capacity", "Cloud Quotas gives limits, not what is in use or free in the region"))
    return found


def _first(error: BaseException) -> str:
    return ((str(error).strip().splitlines() or [type(error).__name__])[0] or type(error).__name__)[:300]
