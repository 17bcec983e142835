"""What `crosstrain check` reads from a workspace for an AI Runtime job, read-only: the token and the code's
folder (shared with classic clusters), and AI Runtime's provisioned capacity
(`GET /api/2.0/ai-training/provisioned-capacities`), where the workspace has it. AI Runtime has no quota a
workspace shows, and no capacity error: a run waits for GPUs; `scheduling.max_wait` bounds that wait."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crosstrain.backends._databricks_checks import read, workspace_checks
from crosstrain.preflight import Check, Outcome, unchecked

if TYPE_CHECKING:
    from databricks.sdk import WorkspaceClient

    from crosstrain.backends.databricks_air.plan import Plan
    from crosstrain.backends.databricks_air.settings import DatabricksAIRSettings

CAPACITIES = "/api/2.0/ai-training/provisioned-capacities"


def checks(client: WorkspaceClient, settings: DatabricksAIRSettings, plan: Plan) -> list[Check]:
    found = workspace_checks(client, settings.host, settings.workspace_dir, settings.volume)
    if not found[0].passed:
        return found
    answer: Any = read("capacity", lambda: client.api_client.do("GET", CAPACITIES), {})
    if isinstance(answer, Check):
        if answer.outcome in (Outcome.UNCHECKED, Outcome.NOT_FOUND):
            return [*found, unchecked("capacity", "the workspace serves no AI Runtime capacity list (a preview)")]
        return [*found, answer]
    wanted = settings.provisioned_capacity_id
    rows = [c for c in answer.get("provisioned_capacities") or [] if isinstance(c, dict)]
    if wanted is not None:
        mine = next((c for c in rows if str(c.get("id")) == wanted), None)
        if mine is None:
            return [
                *found,
                Check(
                    "capacity",
                    Outcome.NOT_FOUND,
                    f"no provisioned capacity {wanted}",
                    "set provisioned_capacity_id to one the workspace lists, or remove it",
                ),
            ]
        reserved = int(mine.get("reserved_accelerators") or 0)
        if reserved < plan.accelerator_count:
            return [
                *found,
                Check(
                    "capacity",
                    Outcome.CAPACITY,
                    f"capacity {wanted} reserves {reserved} accelerators; the job asks {plan.accelerator_count}",
                    "ask for fewer GPUs, or use a larger reservation",
                ),
            ]
    kinds = sorted({str(c.get("accelerator_type")) for c in rows})
    said = f"reservations: {', '.join(kinds)}" if rows else "no reservation: the run waits for on-demand GPUs"
    return [*found, Check("capacity", Outcome.OK, said)]
