"""What a Databricks AI Runtime job costs: serverless DBUs, one bundled rate with no separate VM bill
(docs.databricks.com/resources/pricing.html). The DBU rate of each `GPU_*` accelerator type is not published
where crosstrain could read it, so the cost says that price is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crosstrain import pricing

if TYPE_CHECKING:
    from crosstrain.backends.databricks_air.plan import Plan
    from crosstrain.backends.databricks_air.settings import DatabricksAIRSettings
    from crosstrain.spec import TrainingJob

PACKAGE = "crosstrain.backends.databricks_air"


def cost(job: TrainingJob, settings: DatabricksAIRSettings, plan: Plan) -> pricing.Cost:
    need = pricing.Need(plan.accelerator_type, plan.nodes, "", False)
    return pricing.cost(
        "databricks-air", pricing.table(PACKAGE, "AI Runtime serverless DBU rate"), [need], job.scheduling.timeout
    )
