"""What `crosstrain check` reads from a Databricks workspace for a classic-cluster job, read-only: the token and
the code's folder (shared with AI Runtime), whether the workspace offers the job's node type in its region
(`clusters/list-node-types`: NotAvailableInRegion, NotEnabledOnSubscription), the instance pools of that node type
and what they have left, and the cluster policies that would not allow it. A classic cluster's VM quota is the
cloud account's, which a workspace does not show: it is said, not checked."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from crosstrain.backends._databricks_checks import read, workspace_checks
from crosstrain.preflight import Check, Outcome, unchecked

if TYPE_CHECKING:
    from databricks.sdk import WorkspaceClient

    from crosstrain.backends.databricks.plan import Planned
    from crosstrain.backends.databricks.settings import DatabricksSettings


def checks(client: WorkspaceClient, settings: DatabricksSettings, planned: Planned) -> list[Check]:
    found = workspace_checks(client, settings.host, settings.workspace_dir, settings.volume)
    if not found[0].passed:
        return found  # no token: nothing else can be read
    plan = planned.shape
    node = plan.machine.machine_type or ""
    nodes = 1 if plan.single_node else plan.nodes + 1
    found.append(_node_type(client, node, plan.machine.gpu_count))
    found += _pools(client, node, nodes)
    found += _policies(client, node)
    found.append(unchecked("quota", f"the cloud account's VM quota for {node} is not visible from the workspace"))
    return found


def _node_type(client: WorkspaceClient, node: str, gpus: int) -> Check:
    listed: Any = read("node type", client.clusters.list_node_types, {})
    if isinstance(listed, Check):
        return listed
    match = next((t for t in listed.node_types or [] if t.node_type_id == node), None)
    if match is None:
        gpu_types = [t for t in listed.node_types or [] if (t.num_gpus or 0) > 0]
        offered = [
            t.node_type_id for t in sorted(gpu_types, key=lambda t: (abs((t.num_gpus or 0) - gpus), t.node_type_id))
        ]
        return Check(
            "node type",
            Outcome.NOT_FOUND,
            f"the workspace offers no node type {node}",
            f"pick a GPU node type it offers: {', '.join(offered[:8]) or 'none has GPUs'}",
        )
    status = [str(getattr(s, "value", s)) for s in (match.node_info.status if match.node_info else None) or []]
    if "NotEnabledOnSubscription" in status:
        return Check(
            "node type",
            Outcome.QUOTA,
            f"{node} is not enabled on the cloud subscription",
            "ask the cloud account's admin to enable the VM family (a quota request), or pick another node type",
        )
    if "NotAvailableInRegion" in status:
        return Check(
            "node type",
            Outcome.CAPACITY,
            f"{node} is not available in the workspace's region",
            "pick a node type the region offers, or a workspace in another region",
        )
    if match.is_deprecated:
        return Check("node type", Outcome.OK, f"{node} is offered, and deprecated")
    return Check("node type", Outcome.OK, f"{node} is offered ({match.num_gpus or 0} GPUs)")


def _pools(client: WorkspaceClient, node: str, nodes: int) -> list[Check]:
    pools: Any = read("instance pools", lambda: list(client.instance_pools.list()), {})
    if isinstance(pools, Check):
        return [pools] if pools.outcome is Outcome.PERMISSION else []
    mine = [p for p in pools if p.node_type_id == node]
    if not mine:
        return [Check("instance pools", Outcome.OK, f"no pool of {node}: the cluster's nodes come from the cloud")]
    said = []
    for pool in mine:
        stats = pool.stats
        used = (stats.used_count or 0) + (stats.pending_used_count or 0) if stats else 0
        left = None if pool.max_capacity is None else pool.max_capacity - used
        said.append(f"{pool.instance_pool_name}: {'no cap' if left is None else f'{left} of {pool.max_capacity} left'}")
    return [Check("instance pools", Outcome.OK, f"pools of {node} (the job takes {nodes} nodes): " + "; ".join(said))]


def _policies(client: WorkspaceClient, node: str) -> list[Check]:
    policies: Any = read("cluster policies", lambda: list(client.cluster_policies.list()), {})
    if isinstance(policies, Check):
        return []
    refusing = [p.name for p in policies if not _allows(p.definition, node)]
    if not refusing:
        return []
    return [
        Check(
            "cluster policies",
            Outcome.OK,
            f"policies that do not allow {node}: {', '.join(refusing)} (a runs/submit cluster names none)",
        )
    ]


def _allows(definition: str | None, node: str) -> bool:
    try:
        rule = json.loads(definition or "{}").get("node_type_id") or {}
    except (ValueError, AttributeError):
        return True
    kind = rule.get("type")
    if kind == "fixed":
        return bool(rule.get("value") == node)
    if kind == "allowlist":
        return node in (rule.get("values") or [])
    if kind == "blocklist":
        return node not in (rule.get("values") or [])
    return True
