"""What `crosstrain check` reads from Azure ML before a submit, read-only (ARM GETs through MLClient): the
credential against the workspace (and where it is), the compute cluster (it exists, its VM size is the job's,
it scales to the job's nodes), the regional vCPU quota of the size's VM family and in total against what the
job asks (`locations/{loc}/usages` with `vmSizes` for the family and vCPUs; low priority where `spot: true`),
and the default datastore. Azure ML has no preflight of its own: these are the errors a command job would meet
after submit (JobNodeCountExceedsCoreQuota, OutOfQuota, ClusterMinNodesExceedCoreQuota)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from crosstrain.preflight import Check, Outcome, classify, enough, unchecked

if TYPE_CHECKING:
    from crosstrain.backends.azureml.plan import Plan
    from crosstrain.backends.azureml.settings import AzureMLSettings
    from crosstrain.spec import TrainingJob

T = TypeVar("T")
_BY_CLASS = {"ClientAuthenticationError": Outcome.PERMISSION, "ResourceNotFoundError": Outcome.NOT_FOUND}


def outcome_of(error: BaseException) -> Outcome:
    for cls in type(error).__mro__:
        if cls.__name__ in _BY_CLASS:
            return _BY_CLASS[cls.__name__]
    return classify(getattr(error, "status_code", None), str(error))


def read(name: str, call: Callable[[], T], fixes: dict[Outcome, str]) -> T | Check:
    try:
        return call()
    except Exception as error:  # any failure of a read is a check's outcome, not a crash
        outcome = outcome_of(error)
        text = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return Check(name, outcome, text[:300], fixes.get(outcome, "retry, or check Azure's status page"))


def family_key(name: str) -> str:
    """A VM family as Usage and VmSize both name it: lower case, no spaces or underscores, no suffix."""
    key = re.sub(r"[\s_]", "", name).lower()
    return re.sub(r"(clusterdedicatedvcpus|dedicatedvcpus|vcpus)$", "", key)


def checks(client: Any, job: TrainingJob, settings: AzureMLSettings, plan: Plan) -> list[Check]:
    where = f"{settings.workspace} (resource group {settings.resource_group})"
    workspace: Any = read(
        "workspace",
        lambda: client.workspaces.get(settings.workspace),
        {
            Outcome.PERMISSION: "sign in (`az login`) or set AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET; "
            "the identity needs Reader on the workspace",
            Outcome.NOT_FOUND: "set subscription_id, resource_group and workspace to a workspace that exists",
        },
    )
    if isinstance(workspace, Check):
        return [workspace]
    location = str(workspace.location or "")
    found = [Check("workspace", Outcome.OK, f"{where} exists, in {location or 'an unstated region'}")]
    compute = settings.compute
    size, vcpus, family = plan.machine.machine_type, 0, ""
    if compute:
        cluster: Any = read(
            "compute",
            lambda: client.compute.get(compute),
            {
                Outcome.NOT_FOUND: f"create compute {compute} (`az ml compute create --type AmlCompute`), "
                "or set `compute`"
            },
        )
        if isinstance(cluster, Check):
            return [*found, cluster]
        found += _cluster(cluster, compute, size, plan.nodes)
        size = size or str(getattr(cluster, "size", "") or "")
    else:
        found.append(unchecked("compute", "no compute named: Azure ML picks serverless compute"))
    if not size or not location:
        return [*found, unchecked("quota", "the VM size or the region is not known: the quota is not read")]
    sizes: Any = read("quota", lambda: list(client.compute.list_sizes(location=location)), {})
    if isinstance(sizes, Check):
        return [*found, sizes]
    match = next((s for s in sizes if str(s.name).lower() == size.lower()), None)
    if match is None:
        return [
            *found,
            Check(
                "quota",
                Outcome.CAPACITY,
                f"{location} offers no {size} to Azure ML",
                "use a workspace in a region that offers the size, or another size",
            ),
        ]
    vcpus, family = _vcpus(match) * plan.nodes, str(match.family or "")
    if not vcpus:
        return [*found, unchecked("quota", f"{location} lists no vCPU count for {size}")]
    usages: Any = read("quota", lambda: list(client.compute.list_usage(location=location)), {})
    if isinstance(usages, Check):
        return [*found, usages]
    return [*found, *_quota(usages, family, vcpus, size, plan.nodes, location, job.scheduling.spot)]


def _vcpus(size: Any) -> int:
    """A VmSize's vCPUs: azure-ai-ml 1.35 copies the REST model's dict into the entity, so the count is under
    the wire's key (`vCPUs`) and `v_cp_us` stays None."""
    value = getattr(size, "v_cp_us", None) or vars(size).get("vCPUs") or vars(size).get("v_cpus")
    return int(value or 0)


def _used(usage: Any) -> float | None:
    """A Usage's current value (under the wire's key, as `_vcpus` says)."""
    value = getattr(usage, "current_value", None)
    return float(value if value is not None else vars(usage).get("currentValue") or 0)


def _name(usage: Any) -> str:
    """A usage's name: azure-ai-ml keeps it as the service's `{value, localizedValue}` or as a `UsageName`."""
    name = usage.name
    return str((name.get("value") if isinstance(name, dict) else getattr(name, "value", name)) or "")


def _cluster(cluster: Any, compute: str, size: str | None, nodes: int) -> list[Check]:
    has = str(getattr(cluster, "size", "") or "")
    most = getattr(cluster, "max_instances", None)
    if size and has and has.lower() != size.lower():
        return [
            Check(
                "compute",
                Outcome.INVALID,
                f"compute {compute} runs {has}; the job asks for {size}",
                f"name a compute of {size}, or give the job the machine {has}",
            )
        ]
    if most is not None and most < nodes:
        return [
            Check(
                "compute",
                Outcome.CAPACITY,
                f"compute {compute} scales to {most} nodes; the job needs {nodes}",
                f"raise its max instances: az ml compute update -n {compute} --max-instances {nodes}",
            )
        ]
    return [Check("compute", Outcome.OK, f"compute {compute}: {has or 'its size'}, up to {most} nodes")]


def _quota(usages: list[Any], family: str, vcpus: int, size: str, nodes: int, location: str, spot: bool) -> list[Check]:
    kind = "low-priority" if spot else family
    fix = f"ask for more {kind} vCPUs in {location} (Azure portal: Quotas, Machine learning), or ask for fewer nodes"

    def usage(pick: Callable[[Any], bool]) -> Any:
        return next((u for u in usages if pick(u)), None)

    asked = f"{nodes} x {size}"
    if spot:
        low = usage(lambda u: str(u.type or "").endswith("/lowPriorityCores/usages"))
        if low is None:
            return [unchecked("quota", f"{location} lists no low-priority vCPU quota")]
        return [enough("quota", vcpus, low.limit, _used(low), f"low-priority vCPUs for {asked}", fix)]
    mine = usage(
        lambda u: str(u.type or "").endswith("/vmFamily/usages") and family_key(_name(u)) == family_key(family)
    )
    total = usage(lambda u: str(u.type or "").endswith("/dedicatedCores/usages"))
    found = []
    if mine is None:
        found.append(unchecked("quota", f"{location} lists no quota for {family}"))
    else:
        found.append(enough("quota", vcpus, mine.limit, _used(mine), f"{family} vCPUs for {asked}", fix))
    if total is not None:
        found.append(enough("quota", vcpus, total.limit, _used(total), "dedicated vCPUs in the region", fix))
    return found
