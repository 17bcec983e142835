"""The fake cloud with capacity: per GPU kind, what the service does with a job that asks for it.

* "ok": created, queued for `queue_seconds`, then runs for an hour;
* "quota": the create is refused, 429 with Vertex's words for quota ("exceed quota limits");
* "stockout": created, then failed `fail_after` seconds later for capacity, before it ran
  (ZONE_RESOURCE_POOL_EXHAUSTED);
* "dws": created and queued; `scheduling.max_wait` (scaled by `dws_scale`) later the service fails it: its wait for
  capacity expired;
* "held": created and queued until cancelled (a service that never ends the wait itself).

It keeps every job with the run and attempt labels, so `live_intervals` gives when each was live by the cloud's own
clock: the benchmark and the tests count the live jobs of a run at every moment from them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crosstrain import catalog
from crosstrain.backends.fake import FakeBackend, FakeCloud, FakeSettings
from crosstrain.backends.loopback import Call, Reply
from crosstrain.preflight import Check, Outcome
from crosstrain.spec import TrainingJob

RUN_SECONDS = 3600.0
QUOTA_WORDS = (
    "Quota exceeded: the following quota metrics exceed quota limits: "
    "aiplatform.googleapis.com/custom_model_training_nvidia_h100_gpus"
)
STOCKOUT_WORDS = (
    "ZONE_RESOURCE_POOL_EXHAUSTED: The zone does not have enough resources available to fulfill the request"
)
EXPIRED_WORDS = "The job could not be scheduled within its maximum wait duration (maxWaitDuration)"


class CapacityCloud(FakeCloud):
    def __init__(
        self,
        plans: Mapping[str, str],
        *,
        fail_after: float = 0.05,
        dws_scale: float = 0.05,
        queue_seconds: float = 0.0,
        run_seconds: float = RUN_SECONDS,
    ) -> None:
        super().__init__()
        self.plans = dict(plans)
        self.fail_after, self.dws_scale, self.queue_seconds = fail_after, dws_scale, queue_seconds
        self.run_seconds = run_seconds

    def _plan(self, body: Any) -> str:
        gpu = (body.get("pools") or [{}])[0].get("machine", {}).get("gpu") if isinstance(body, dict) else None
        return self.plans.get(str(gpu), "ok")

    def answer(self, call: Call) -> Reply:
        path = Path(call.path.removesuffix(":cancel"))
        if call.method == "PUT" and not path.exists():
            plan = self._plan(call.body)
            if plan == "quota":
                return self.error(429, QUOTA_WORDS)
            wait = (call.body.get("scheduling") or {}).get("max_wait") or 0
            after = {"stockout": self.fail_after, "dws": wait * self.dws_scale}.get(plan)
            body = {
                **call.body,
                "plan": {**call.body["plan"], "queueSeconds": 1e9 if plan != "ok" else self.queue_seconds},
                "verdict": {"failAfter": after, "error": STOCKOUT_WORDS if plan == "stockout" else EXPIRED_WORDS}
                if after is not None
                else None,
            }
            body["plan"]["runSeconds"] = self.run_seconds
            call = Call(call.method, call.path, call.query, body, call.headers, call.raw)
        reply = super().answer(call)
        if isinstance(reply.body, dict) and reply.body.get("verdict"):  # said once the job reads failed
            reply = Reply(reply.status, {**reply.body, "error": reply.body["verdict"]["error"]}, reply.headers)
        return reply

    def _failed(self, record: dict[str, Any]) -> bool:
        verdict = record.get("verdict")
        if not verdict:
            return False
        failed_at = record["createTime"] + verdict["failAfter"]
        cancelled = record.get("cancelTime")
        return self.clock() >= failed_at and (cancelled is None or cancelled > failed_at)

    def native_state(self, record: dict[str, Any]) -> str:
        if self._failed(record):
            return "ERROR"
        return super().native_state(record)

    def live_intervals(self, root: Path) -> dict[str, list[tuple[float, float, str]]]:
        """Per run (its label), each job's (created, ended, identity): ended is when it failed, was cancelled, or
        inf for one still live."""
        runs: dict[str, list[tuple[float, float, str]]] = {}
        for path in (root / "jobs").glob("*.json"):
            record = json.loads(path.read_text())
            run = (record.get("labels") or {}).get("crosstrain-run")
            if run is None:
                continue
            created = float(record["createTime"])
            ends = [float("inf")]
            if record.get("cancelTime") is not None:
                ends.append(float(record["cancelTime"]))
            verdict = record.get("verdict")
            if verdict:
                ends.append(created + verdict["failAfter"])
            runs.setdefault(run, []).append((created, min(ends), record["identity"]))
        return runs


class CapacityBackend(FakeBackend):
    """The fake backend with a preflight that reads the cloud's plans: quota where the cloud refuses the GPU for
    quota, capacity where it stocks out, "denied" for a GPU the plans mark "denied"."""

    cloud: CapacityCloud

    def preflight(self, job: TrainingJob, settings: FakeSettings, plan: None) -> list[Check]:
        machine = job.pools()[0].machine
        gpu = catalog.canonical_gpu(machine.accelerator.type) if machine and machine.accelerator else None
        said = self.cloud.plans.get(str(gpu), "ok")
        outcome = {"quota": Outcome.QUOTA, "stockout": Outcome.CAPACITY, "denied": Outcome.PERMISSION}.get(said)
        if outcome is None:
            return [Check("quota", Outcome.OK, f"{gpu}: the quota allows it")]
        return [Check("quota", outcome, f"{gpu}: {said}", "ask for more, or another machine")]


def most_live(intervals: list[tuple[float, float, str]]) -> int:
    """The most jobs live at one moment, from their (created, ended) intervals."""
    events = sorted([(start, 1) for start, _, _ in intervals] + [(end, -1) for _, end, _ in intervals])
    live = most = 0
    for _, step in events:  # an end at the moment of a start counts first (-1 sorts before 1)
        live += step
        most = max(most, live)
    return most
