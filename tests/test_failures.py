"""Failures classified from what the platform or the failing rank said."""

from __future__ import annotations

import pytest

from crosstrain.failures import USER_CODE, classify, last_lines


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("The zone 'us-central1-a' does not have enough resources (ZONE_RESOURCE_POOL_EXHAUSTED)", "quota or capacity"),
        ("Quota exceeded for resource 'NVIDIA_A100_GPUS'", "quota or capacity"),
        ("The VM was preempted", "preemption"),
        ("Failed to pull image us-docker.pkg.dev/p/r/i:1: manifest unknown: not found", "image pull"),
        (
            "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
            "rendezvous timeout",
        ),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out of memory"),
        ("ModuleNotFoundError: No module named 'transformers'", "missing module"),
        ("ValueError: bad learning rate", USER_CODE),
    ],
)
def test_kinds(text: str, kind: str) -> None:
    assert classify(text)[0] == kind
    assert classify(text)[1]


def test_last_lines_skip_blank_ones() -> None:
    assert last_lines(["a", "", "b", "  ", "c"], 2) == ["b", "c"]
