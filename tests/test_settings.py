"""Target settings: defaults < environment < job file < --set, with errors that say where to set them."""

from __future__ import annotations

import pytest

from crosstrain.errors import SpecError
from crosstrain.settings import TargetSettings, parse_assignments, resolve_settings, setting


class CloudSettings(TargetSettings):
    project: str = setting(description="Project.", env=("CLOUD_PROJECT", "OTHER_PROJECT"))
    region: str = setting("us-central1", description="Region.", env=("CLOUD_REGION",))
    replicas_cap: int = setting(10, description="Cap.")


def test_layers_in_order() -> None:
    env = {"CLOUD_PROJECT": "from-env", "CLOUD_REGION": "env-region"}
    got = resolve_settings(CloudSettings, "cloud", environ=env)
    assert (got.project, got.region) == ("from-env", "env-region")
    got = resolve_settings(CloudSettings, "cloud", section={"project": "from-file"}, environ=env)
    assert (got.project, got.region) == ("from-file", "env-region")
    got = resolve_settings(
        CloudSettings,
        "cloud",
        section={"project": "from-file"},
        overrides={"project": "from-set", "replicas_cap": "3"},
        environ=env,
    )
    assert (got.project, got.replicas_cap) == ("from-set", 3)


def test_second_env_var_is_a_fallback() -> None:
    assert resolve_settings(CloudSettings, "cloud", environ={"OTHER_PROJECT": "p2"}).project == "p2"


def test_missing_required_setting_says_every_way_to_set_it() -> None:
    with pytest.raises(SpecError) as err:
        resolve_settings(CloudSettings, "cloud", environ={})
    [problem] = err.value.problems
    assert problem.path == "targets.cloud.project"
    assert problem.message == "cloud needs `project`"
    assert problem.fix == (
        "set it with `--set project=...`, `targets.cloud.project` in the job file, $CLOUD_PROJECT, $OTHER_PROJECT"
    )


def test_bad_values_name_the_setting() -> None:
    with pytest.raises(SpecError) as err:
        resolve_settings(CloudSettings, "cloud", section={"project": "p", "replicas_cap": "lots", "zone": "a"})
    assert sorted(p.path for p in err.value.problems) == ["targets.cloud.replicas_cap", "targets.cloud.zone"]


def test_parse_assignments() -> None:
    assert parse_assignments(["project=p", "spark-version=15.4=x"]) == {"project": "p", "spark_version": "15.4=x"}
    with pytest.raises(SpecError, match="not key=value"):
        parse_assignments(["project"])


@pytest.mark.parametrize(
    ("target", "settings", "path", "fix"),
    [
        # Fuzzed: a plain ValueError from a validator came back as "Value error, ..." with no fix.
        (
            "databricks",
            {"host": "https://dbc-1.cloud.databricks.com", "workspace_dir": "A100:x"},
            "targets.databricks.workspace_dir",
            "use a folder under /Workspace/",
        ),
        ("vertex", {"project": "p", "region": "Mars"}, "targets.vertex.region", "use one such as us-central1"),
        ("aiplatform", {"project": "p", "endpoint": "ftp://x"}, "targets.aiplatform.endpoint", "use one such as"),
        ("databricks", {"host": "https://h.example/path"}, "targets.databricks.host", "use one such as"),
        (
            "azureml",
            {"subscription_id": "s", "resource_group": "a/b", "workspace": "w"},
            "targets.azureml.resource_group",
            "give the name alone",
        ),
    ],
)
def test_a_validators_value_error_gives_its_fix(target: str, settings: dict[str, str], path: str, fix: str) -> None:
    from crosstrain.registry import get_backend_class

    with pytest.raises(SpecError) as err:
        resolve_settings(get_backend_class(target).settings_model, target, section=settings)
    [problem] = err.value.problems
    assert problem.path == path
    assert problem.fix.startswith(fix)
    assert not problem.message.startswith("Value error")
