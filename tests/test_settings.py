"""Target settings: defaults < config file < its profile < environment < job file < --set, each value with
where it came from, and errors that say where to set them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crosstrain import userconfig
from crosstrain.errors import SpecError
from crosstrain.settings import TargetSettings, parse_assignments, resolve_settings, setting, sourced


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
        "set it with `--set project=...`, `targets.cloud.project` in the job file, $CLOUD_PROJECT, $OTHER_PROJECT, "
        "`crosstrain config set cloud.project VALUE`"
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


# --- the config file's layers: one test per boundary of the order -----------------------------------------
#
# The fake target stands in for a cloud: `root` has a variable (CROSSTRAIN_FAKE_ROOT), `outcome` none.
FAKE_CONFIG = """\
[targets.fake]
root = "/from/config"
outcome = "failed"
run_seconds = 1

[profiles.dev.targets.fake]
root = "/from/profile"
"""


def fake(tmp_path: Path, text: str = FAKE_CONFIG, profile: str | None = None, **layers: Any) -> tuple[Any, str]:
    """The fake target's `root` resolved over the config file `text` and the other `layers`, and its origin."""
    from crosstrain.backends.fake import FakeSettings

    path = tmp_path / "config.toml"
    path.write_text(text)
    environ = {"CROSSTRAIN_CONFIG": str(path), **layers.pop("environ", {})}
    config = userconfig.load(environ, profile).layers("fake")
    settings = resolve_settings(FakeSettings, "fake", config=config, environ=environ, **layers)
    return settings.root, sourced(FakeSettings, config=config, environ=environ, **layers)["root"][1]


def test_the_config_file_is_over_the_defaults(tmp_path: Path) -> None:
    from crosstrain.backends.fake import FakeSettings

    assert resolve_settings(FakeSettings, "fake").root == "~/.cache/crosstrain/fake-cloud"
    assert fake(tmp_path) == ("/from/config", f"config ({tmp_path / 'config.toml'})")


def test_the_profile_is_over_the_config_files_defaults(tmp_path: Path) -> None:
    assert fake(tmp_path, profile="dev") == ("/from/profile", f"profile dev ({tmp_path / 'config.toml'})")


def test_the_environment_is_over_the_profile(tmp_path: Path) -> None:
    assert fake(tmp_path, profile="dev", environ={"CROSSTRAIN_FAKE_ROOT": "/from/env"}) == (
        "/from/env",
        "env CROSSTRAIN_FAKE_ROOT",
    )


def test_the_job_file_is_over_the_environment(tmp_path: Path) -> None:
    got = fake(tmp_path, environ={"CROSSTRAIN_FAKE_ROOT": "/from/env"}, section={"root": "/from/job"})
    assert got == ("/from/job", "job file")


def test_set_is_over_the_job_file(tmp_path: Path) -> None:
    got = fake(tmp_path, section={"root": "/from/job"}, overrides={"root": "/from/set"})
    assert got == ("/from/set", "--set")


def test_each_value_keeps_where_it_came_from(tmp_path: Path) -> None:
    from crosstrain.backends.fake import FakeSettings

    path = tmp_path / "config.toml"
    path.write_text(FAKE_CONFIG)
    environ = {"CROSSTRAIN_CONFIG": str(path), "CROSSTRAIN_FAKE_ROOT": "/from/env"}
    config = userconfig.load(environ, "dev").layers("fake")
    given = sourced(FakeSettings, config=config, environ=environ, section={"run_seconds": 2})
    assert given == {
        "root": ("/from/env", "env CROSSTRAIN_FAKE_ROOT"),
        "outcome": ("failed", f"config ({path})"),
        "run_seconds": (2, "job file"),
    }


def test_the_home_folder_is_shown_as_a_tilde(tmp_path: Path) -> None:
    folder = tmp_path / ".config" / "crosstrain"
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text(FAKE_CONFIG)
    layers = userconfig.load({"HOME": str(tmp_path)}).layers("fake")
    assert [layer.origin for layer in layers] == ["config (~/.config/crosstrain/config.toml)"]


@pytest.mark.parametrize(
    ("text", "path", "message", "fix"),
    [
        (
            '[targets.fake]\nroot = "/r"\nrots = "/r"\n',
            "targets.fake.rots",
            "fake has no setting 'rots'",
            "did you mean 'root'?",
        ),
        ("[targets.fake]\nrun_seconds = 'soon'\n", "targets.fake.run_seconds", "(got 'soon')", "use a number"),
        ("[targets.fake]\nroot = 7\n", "targets.fake.root", "valid string (got 7)", "quote the value"),
        ("[targets.fake]\noutcome = 'maybe'\n", "targets.fake.outcome", "(got 'maybe')", "use one of"),
        (
            "[profiles.dev.targets.fake]\nrot = 1\n",
            "profiles.dev.targets.fake.rot",
            "no setting 'rot'",
            "did you mean 'root'?",
        ),
    ],
)
def test_a_bad_key_or_value_in_the_config_file_names_the_file_and_its_key(
    tmp_path: Path, text: str, path: str, message: str, fix: str
) -> None:
    with pytest.raises(SpecError) as err:
        fake(tmp_path, text, profile="dev" if "profiles" in text else None)
    assert str(err.value).startswith(f"invalid config file ({tmp_path / 'config.toml'}): 1 problem")
    [problem] = err.value.problems
    assert (problem.path, problem.fix[: len(fix)]) == (path, fix)
    assert message in problem.message


def test_a_bad_value_from_anywhere_but_the_job_file_says_where_it_came_from() -> None:
    with pytest.raises(SpecError) as err:
        resolve_settings(CloudSettings, "cloud", environ={"CLOUD_PROJECT": "p"}, overrides={"replicas_cap": "many"})
    [problem] = err.value.problems
    assert problem.path == "targets.cloud.replicas_cap"
    assert problem.message.endswith("(given as an override: --set, or settings passed in Python)")


def test_the_python_api_picks_a_profile_with_config_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`profile=` is a Databricks setting (its ~/.databrickscfg profile): the config file's is `config_profile=`."""
    import crosstrain

    path = tmp_path / "config.toml"
    path.write_text(FAKE_CONFIG)
    monkeypatch.setenv("CROSSTRAIN_CONFIG", str(path))
    monkeypatch.delenv("CROSSTRAIN_FAKE_ROOT", raising=False)
    job = {"name": "j", "command": "python train.py"}
    assert crosstrain.render(job, "fake").settings["root"] == "/from/config"
    assert crosstrain.render(job, "fake", config_profile="dev").settings["root"] == "/from/profile"
    assert crosstrain.render(job, "fake", environ={}).settings["root"] == "~/.cache/crosstrain/fake-cloud"
    host = "https://dbc-1.cloud.databricks.com"
    machine = {**job, "command": "python /Workspace/train.py", "primary": {"machine": "T4:1"}}
    request = crosstrain.render(machine, "databricks", host=host, profile="DEFAULT", config_profile="dev")
    assert request.settings["profile"] == "DEFAULT"
    with pytest.raises(SpecError, match="no profile 'qa'"):
        crosstrain.validate({**job, "targets": {"fake": {}}}, config_profile="qa")
