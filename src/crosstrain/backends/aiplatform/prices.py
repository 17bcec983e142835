"""AI Platform Training's list prices: machine-hours plus accelerator-hours per replica, as Vertex AI bills
custom training ("Vertex AI prices equal the legacy AI Platform prices", cloud.google.com/vertex-ai/pricing),
priced from `prices.json` in this package. A scale tier's machines are the service's choice: not priced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crosstrain import pricing

if TYPE_CHECKING:
    from crosstrain.backends.aiplatform.plan import Plan
    from crosstrain.backends.aiplatform.settings import AIPlatformSettings
    from crosstrain.spec import TrainingJob

PACKAGE = "crosstrain.backends.aiplatform"
LEAVES_OUT = ("Cloud Storage and egress",)


def cost(job: TrainingJob, settings: AIPlatformSettings, plan: Plan) -> pricing.Cost:
    spot, region = job.scheduling.spot, settings.region
    needs: list[pricing.Need] = []
    for pool in job.pools():
        planned = plan.pools.get(pool.role)
        machine = planned.machine if planned is not None else None
        if machine is None or not machine.machine_type:
            needs.append(pricing.Need(f"AI Platform's default machine for {pool.role}", pool.replicas, region, spot))
            continue
        needs.append(
            pricing.Need(machine.machine_type, pool.replicas, region, spot, f"{machine.machine_type} ({pool.role})")
        )
        if machine.accelerator and machine.gpu_count:
            needs.append(pricing.Need(machine.accelerator, machine.gpu_count * pool.replicas, region, spot))
    table = pricing.table(PACKAGE, "AI Platform training price")
    return pricing.cost("aiplatform", table, needs, job.scheduling.timeout, LEAVES_OUT)
