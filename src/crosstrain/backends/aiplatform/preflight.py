"""What `crosstrain check` reads from AI Platform Training, read-only: the credentials and the project against
the service (one page of `projects.jobs.list` at the configured endpoint), and the staging bucket. AI
Platform's GPU quotas are ml.googleapis.com's, whose metric names crosstrain cannot confirm: they are said, not
checked (a refusal at create is a 429 "Quota failure for project ...", which submit reports)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from crosstrain.preflight import Check, Outcome, classify, unchecked

if TYPE_CHECKING:
    from crosstrain.backends.aiplatform.settings import AIPlatformSettings

FIXES = {
    Outcome.PERMISSION: "run `gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS), and "
    "grant the account roles/ml.developer on the project",
    Outcome.NOT_FOUND: "set `project` to a project that exists, with the AI Platform Training API enabled",
}


def checks(
    settings: AIPlatformSettings, get: Callable[[str], tuple[int, Any]], staging: Callable[[], Check]
) -> list[Check]:
    """`get(url)` gives the status and JSON of a GET (raising where it could not be sent); `staging()` reads the
    staging bucket."""
    url = f"{settings.endpoint.rstrip('/')}/v1/projects/{settings.project}/jobs?pageSize=1"
    try:
        status, body = get(url)
    except Exception as error:  # any failure of a read is a check's outcome, not a crash
        text = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        outcome = Outcome.PERMISSION if "credentials" in text.lower() else Outcome.UNREACHABLE
        return [Check("project", outcome, text, FIXES.get(outcome, "check the endpoint and your network"))]
    if status >= 400:
        message = str(((body or {}).get("error") or {}).get("message") or status) if isinstance(body, dict) else ""
        outcome = classify(status, message)
        return [Check("project", outcome, f"{status}: {message}"[:300], FIXES.get(outcome, "retry"))]
    return [
        Check("project", Outcome.OK, f"AI Platform Training answers for {settings.project}"),
        staging(),
        unchecked("quota", "AI Platform's GPU quotas (ml.googleapis.com) are not read"),
    ]
