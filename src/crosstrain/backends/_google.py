"""What the Google backends (Vertex AI, AI Platform Training) share: labels and the identity label."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from crosstrain.errors import Problem

if TYPE_CHECKING:
    from crosstrain.spec import TrainingJob

# The label that carries crosstrain's render-time identity, so a job can be found again after a lost response.
IDENTITY_LABEL = "crosstrain-id"
_LABEL = re.compile(r"^[a-z0-9_-]{0,63}$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")


def label_problems(job: TrainingJob) -> list[Problem]:
    """Google's label rules: keys start with a lowercase letter; keys and values are at most 63 characters of
    lowercase letters, digits, `_` and `-`. Refused rather than rewritten, so the labels you search by are yours."""
    problems = []
    for key, value in job.labels.items():
        if not _LABEL_KEY.match(key):
            problems.append(
                Problem(
                    f"labels.{key}",
                    "is not a valid Google label key",
                    "use a lowercase letter, then up to 62 lowercase letters, digits, '_' or '-'",
                )
            )
        if not _LABEL.match(value):
            problems.append(
                Problem(
                    f"labels.{key}",
                    f"value {value!r} is not a valid Google label value",
                    "use at most 63 lowercase letters, digits, '_' or '-'",
                )
            )
        if key == IDENTITY_LABEL:
            problems.append(Problem(f"labels.{key}", "is reserved for crosstrain's job identity", "rename the label"))
    return problems


def labels(job: TrainingJob, identity: str) -> dict[str, str]:
    """The job's labels plus the identity label, sorted for a deterministic body."""
    return dict(sorted({**job.labels, IDENTITY_LABEL: identity[:63]}.items()))
