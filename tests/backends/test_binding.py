"""Each platform's credential binding, as its declaration says: a request it rendered passes on a machine
configured for the same place; a request or handle moved anywhere else is refused at the field that moved."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from crosstrain.backends.binding import Binding, Configured, Place
from crosstrain.loader import job_from_dict
from crosstrain.records import JobHandle, Request
from crosstrain.registry import create_backend, get_backend_class
from crosstrain.testing.conformance import BASE_JOB
from tests.backends.azureml_cloud import WORKSPACE

#: Where each cloud target's request is rendered for, and the environment that configures a machine for it.
PLACES: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
    "vertex": ({"project": "proj-a"}, {"CLOUDSDK_CORE_PROJECT": "proj-a"}),
    "aiplatform": ({"project": "proj-a"}, {"GOOGLE_CLOUD_PROJECT": "proj-a"}),
    "azureml": (
        {**WORKSPACE, "compute": "gpu"},
        {
            "AZURE_SUBSCRIPTION_ID": WORKSPACE["subscription_id"],
            "AZUREML_RESOURCE_GROUP": WORKSPACE["resource_group"],
            "AZUREML_WORKSPACE_NAME": WORKSPACE["workspace"],
        },
    ),
    "databricks": (
        {"host": "https://dbc-1.cloud.databricks.com"},
        {"DATABRICKS_HOST": "https://dbc-1.cloud.databricks.com", "DATABRICKS_CONFIG_FILE": "/nonexistent"},
    ),
}


def rendered(target: str) -> Request:
    settings, _ = PLACES[target]
    request = create_backend(target, environ={}).render(job_from_dict(BASE_JOB), settings)
    return Request.from_dict(json.loads(json.dumps(request.to_dict())))  # as read back from a file


def test_every_cloud_target_declares_where_its_credential_goes() -> None:
    for target in PLACES:
        cls = get_backend_class(target)
        assert cls.binding is not None, target
        keys = set(cls.binding.keys) | {cls.binding.origin_key} - {None}
        assert keys <= set(cls.binding_settings), target


@pytest.mark.parametrize("target", sorted(PLACES))
def test_a_request_rendered_for_the_configured_place_passes(target: str) -> None:
    _, environ = PLACES[target]
    assert create_backend(target, environ=environ).request_problems(rendered(target)) == []


@pytest.mark.parametrize("target", sorted(PLACES))
def test_a_request_for_another_place_is_refused_naming_both(target: str) -> None:
    settings, environ = PLACES[target]
    binding = get_backend_class(target).binding
    assert binding is not None
    key = next(name for name in (binding.origin_key, *reversed(binding.keys)) if name in settings)
    value = str(settings[key])
    other = value.replace("proj-a", "proj-b").replace(WORKSPACE["workspace"], "other-ws").replace("dbc-1", "dbc-2")
    configured = {name: text.replace(value, other) for name, text in environ.items()}
    problems = create_backend(target, environ=configured).request_problems(rendered(target))
    assert problems
    assert any(value in problem.message and other in problem.message for problem in problems), problems


@pytest.mark.parametrize("target", sorted(PLACES))
def test_a_call_moved_to_another_host_is_refused_at_that_call(target: str) -> None:
    _, environ = PLACES[target]
    request = rendered(target).to_dict()
    index = len(request["calls"]) - 1  # the create
    request["calls"][index]["url"] = re.sub(r"^https://[^/]+", "https://evil.example", request["calls"][index]["url"])
    problems = create_backend(target, environ=environ).request_problems(Request.from_dict(request))
    assert [problem.path for problem in problems] == [f"request.calls[{index}].url"]
    assert "https://evil.example" in problems[0].message


@pytest.mark.parametrize("target", ["vertex", "aiplatform", "azureml"])
def test_a_path_that_climbs_out_of_its_place_is_refused(target: str) -> None:
    """`..` in a URL's path would leave the project or workspace once a client normalises it."""
    _, environ = PLACES[target]
    request = rendered(target).to_dict()
    index = len(request["calls"]) - 1
    url = request["calls"][index]["url"]
    request["calls"][index]["url"] = re.sub(r"(https://[^/]+)(/[^?]*)", r"\1\2/../../../x", url)
    problems = create_backend(target, environ=environ).request_problems(Request.from_dict(request))
    assert [problem.path for problem in problems] == [f"request.calls[{index}].url"]


def test_names_compare_as_the_platform_compares_them() -> None:
    """Azure names ignore case; a Google project number cannot be compared with an id, so it passes."""
    path = re.compile(r"/p/(?P<project>[^/]+)")
    folded = Binding(re.compile("https://x"), "x", "", "", path=path, keys=("project",), fold_case=True)
    numbered = Binding(re.compile("https://x"), "x", "", "", path=path, keys=("project",), numbered=True)
    env = {"project": "P"}

    def check(binding: Binding, url: str) -> list[str]:
        problems = binding.problems(
            [Place("u", url)], {}, "s", "request", {"project": "Mine"}, Configured(None, ""), env
        )
        return [problem.message for problem in problems]

    assert check(folded, "https://x/p/MINE") == []
    assert check(numbered, "https://x/p/MINE") != []
    assert check(numbered, "https://x/p/123456") == []
    assert check(folded, "https://y/p/Mine") != []


def test_a_handle_naming_a_credentialed_host_is_refused_without_showing_it() -> None:
    ref = {"host": "https://user:hunter2@dbc-1.cloud.databricks.com", "run_id": 1}
    handle = JobHandle.loads(json.dumps({"target": "databricks", "identity": "x", "job_id": "1", "ref": ref}))
    problems = create_backend("databricks", environ=PLACES["databricks"][1]).handle_problems(handle)
    assert [problem.path for problem in problems] == ["handle.ref.host"]
    assert "carries credentials" in problems[0].message
    assert "hunter2" not in str(problems)


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("https://eastus.api.azureml.ms", True),  # a region's run history (a sweep's trials)
        ("https://westeurope2.api.azureml.ms", True),
        ("https://api.azureml.ms", False),  # no region
        ("https://eastus.api.azureml.ms.evil.example", False),
        ("https://evil.example/eastus.api.azureml.ms", False),
        ("http://eastus.api.azureml.ms", False),
        ("https://eastus.api.azureml.ms:8443", False),
    ],
)
def test_azureml_credential_goes_to_arm_and_a_regions_run_history_only(host: str, allowed: bool) -> None:
    _, environ = PLACES["azureml"]
    request = rendered("azureml").to_dict()
    index = len(request["calls"]) - 1
    request["calls"][index]["url"] = re.sub(r"^https://[^/]+", host, request["calls"][index]["url"])
    problems = create_backend("azureml", environ=environ).request_problems(Request.from_dict(request))
    assert (problems == []) is allowed, problems
