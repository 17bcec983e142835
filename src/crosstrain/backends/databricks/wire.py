"""Uploads and the code bundle as the workspace receives them (`crosstrain.backends._databricks`, shared with the
AI Runtime target), and what a run says about its cluster."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from crosstrain.backends._databricks import (  # shared with the AI Runtime target
    _check_call,
    _check_upload_call,
    _check_upload_path,
    _content,
    _files_path,
    _query_path,
    archive_of,
    runtime_bundle,
)

if TYPE_CHECKING:
    from databricks.sdk.service.jobs import Run


def _under(root: Path, target: str) -> bool:
    """Whether `target`, as written, names a path under `root` (symlinks aside)."""
    return Path(os.path.normpath(root / target)).is_relative_to(root)


def _cluster_tags(run: Run) -> dict[str, str] | None:
    """The custom tags of the run's cluster ({} on a run that crosstrain did not make, or made before it recorded
    fingerprints), or None where the workspace reports no task's cluster."""
    clusters = [task.new_cluster for task in run.tasks or [] if task.new_cluster is not None]
    if not clusters:
        return None
    return {str(k): str(v) for cluster in clusters for k, v in (cluster.custom_tags or {}).items()}


__all__ = [
    "_check_call",
    "_check_upload_call",
    "_check_upload_path",
    "_cluster_tags",
    "_content",
    "_files_path",
    "_query_path",
    "_under",
    "archive_of",
    "runtime_bundle",
]
