"""Vertex AI's list prices for custom training: machine-hours plus accelerator-hours per replica, per worker pool
(cloud.google.com/vertex-ai/pricing), priced from `prices.json` in this package.

Google's price API (the Cloud Billing Catalog) needs an API key, so `crosstrain prices --refresh` does not reread
it; the table holds the prices read from Google's page, each with its source and date.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crosstrain import pricing

if TYPE_CHECKING:
    from crosstrain.backends.vertex.plan import Plan
    from crosstrain.backends.vertex.settings import VertexSettings
    from crosstrain.spec import TrainingJob

PACKAGE = "crosstrain.backends.vertex"
LEAVES_OUT = ("boot disks, Cloud Storage and egress",)


def needs(job: TrainingJob, settings: VertexSettings, plan: Plan) -> list[pricing.Need]:
    """Each pool's machines and accelerators, and the reduction server's machines."""
    spot = job.scheduling.spot
    found: list[pricing.Need] = []
    for pool in job.pools():
        planned = plan.pools.get(pool.role)
        if planned is None:
            continue
        machine = planned.machine
        found.append(
            pricing.Need(
                machine.machine_type, pool.replicas, settings.region, spot, f"{machine.machine_type} ({pool.role})"
            )
        )
        if machine.accelerator and machine.gpu_count:
            found.append(pricing.Need(machine.accelerator, machine.gpu_count * pool.replicas, settings.region, spot))
    if job.reduction_server is not None and plan.reducer is not None:
        reducer = job.reduction_server.machine_type
        found.append(pricing.Need(reducer, plan.reducer[0], settings.region, spot, f"{reducer} (reduction server)"))
    return found


def cost(job: TrainingJob, settings: VertexSettings, plan: Plan) -> pricing.Cost:
    table = pricing.table(PACKAGE, "Vertex AI training price")
    return pricing.cost("vertex", table, needs(job, settings, plan), job.scheduling.timeout, LEAVES_OUT)
