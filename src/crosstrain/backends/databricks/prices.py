"""What a Databricks classic job costs: DBUs per node-hour (by node type) times the DBU price (by SKU, tier and
cloud), plus the cloud's VM price per node-hour, billed apart (docs.databricks.com/resources/pricing.html).
Databricks publishes the DBU rates of node types on its pricing pages only, and the account's own prices in the
`system.billing.list_prices` table; crosstrain's table holds none yet, so the cost says which price is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crosstrain import pricing

if TYPE_CHECKING:
    from crosstrain.backends.databricks.plan import Planned
    from crosstrain.backends.databricks.settings import DatabricksSettings
    from crosstrain.spec import TrainingJob

PACKAGE = "crosstrain.backends.databricks"


def cost(job: TrainingJob, settings: DatabricksSettings, planned: Planned) -> pricing.Cost:
    plan = planned.shape
    node = plan.machine.machine_type or "?"
    workers = 0 if plan.single_node else plan.nodes
    driver = settings.driver_node_type_id or node
    needs = [pricing.Need(node, workers or 1, plan.cloud or "", job.scheduling.spot)]
    if workers:
        needs.append(pricing.Need(driver, 1, plan.cloud or "", False, f"{driver} (driver)"))
    table = pricing.table(PACKAGE, "Databricks DBU rate")
    return pricing.cost("databricks", table, needs, job.scheduling.timeout, ("the cloud's VM price, billed apart",))
