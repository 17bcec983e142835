"""`crosstrain config` and the config file on the command line: keys checked before they are written, a profile
picked by --profile or $CROSSTRAIN_PROFILE, the origin of every value in `crosstrain targets`, and a bad file
refused with its path, key and fix, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crosstrain import cli
from tests.conftest import ROOT

JOB = "name: c\ncommand: python train.py\n"


def call(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own config file (not there yet), and a job for the fake target."""
    path = tmp_path / "home" / "crosstrain" / "config.toml"
    monkeypatch.setenv("CROSSTRAIN_CONFIG", str(path))
    monkeypatch.delenv("CROSSTRAIN_FAKE_ROOT", raising=False)
    (tmp_path / "job.yaml").write_text(JOB)
    return path


def rendered(capsys: pytest.CaptureFixture[str], job: Path, *argv: str) -> dict[str, object]:
    code, out, err = call(capsys, "render", str(job), "-t", "fake", "--json", *argv)
    assert code == 0, err
    settings: dict[str, object] = json.loads(out)["settings"]
    return settings


def test_set_get_unset_and_list_round_trip(capsys: pytest.CaptureFixture[str], config: Path) -> None:
    assert call(capsys, "config", "set", "fake.root", "/srv/cloud") == (
        0,
        "",
        f'set targets.fake.root = "/srv/cloud" in {config}\n',
    )
    assert call(capsys, "config", "set", "fake.run_seconds", "2.5")[0] == 0
    assert call(capsys, "config", "set", "fake.outcome", "failed", "--profile", "dev")[0] == 0
    assert call(capsys, "config", "set", "profiles.ci.fake.root", "/ci")[0] == 0
    assert call(capsys, "config", "get", "fake.root")[1] == "/srv/cloud\n"
    assert call(capsys, "config", "get", "fake.run_seconds")[1] == "2.5\n"  # a number in the file, not text
    assert call(capsys, "config", "get", "profiles.dev.fake.outcome")[1] == "failed\n"
    assert call(capsys, "config", "get", "fake.outcome", "--profile", "dev")[1] == "failed\n"
    code, out, err = call(capsys, "config", "list")
    assert code == 0
    assert out.splitlines() == [
        'fake.root = "/srv/cloud"',
        "fake.run_seconds = 2.5",
        'profiles.dev.fake.outcome = "failed"',
        'profiles.ci.fake.root = "/ci"',
    ]
    assert err == f"# {config}\n"
    code, out, _ = call(capsys, "config", "list", "--json")
    assert json.loads(out) == {
        "file": str(config),
        "exists": True,
        "profile": None,
        "profiles": ["dev", "ci"],
        "settings": {
            "fake.root": "/srv/cloud",
            "fake.run_seconds": 2.5,
            "profiles.dev.fake.outcome": "failed",
            "profiles.ci.fake.root": "/ci",
        },
    }
    code, out, err = call(capsys, "config", "unset", "fake.run_seconds", "--json")
    assert (code, json.loads(out)) == (0, {"key": "targets.fake.run_seconds", "removed": True, "file": str(config)})
    assert call(capsys, "config", "unset", "profiles.dev.fake.outcome")[0] == 0
    code, out, err = call(capsys, "config", "get", "fake.run_seconds", "--json")
    assert (code, json.loads(out)["set"]) == (0, False)
    code, out, err = call(capsys, "config", "get", "fake.run_seconds")
    assert (code, out, err) == (0, "", f"targets.fake.run_seconds is not set in {config}\n")
    assert config.read_text() == '[targets.fake]\nroot = "/srv/cloud"\n\n[profiles.ci.targets.fake]\nroot = "/ci"\n'


def test_path_says_where_the_file_is_and_why(capsys: pytest.CaptureFixture[str], config: Path) -> None:
    assert call(capsys, "config", "path") == (0, f"{config}\n", "")
    code, out, _ = call(capsys, "config", "path", "--json")
    assert code == 0
    assert json.loads(out) == {"file": str(config), "exists": False, "from": "$CROSSTRAIN_CONFIG"}


def test_a_missing_file_lists_nothing_and_says_how_to_start_one(
    capsys: pytest.CaptureFixture[str], config: Path
) -> None:
    code, out, err = call(capsys, "config", "list")
    assert (code, out) == (0, "")
    assert "sets nothing: `crosstrain config set TARGET.SETTING VALUE` writes there" in err


@pytest.mark.parametrize(
    ("argv", "path", "message", "fix"),
    [
        (["set", "fake.rot", "/r"], "targets.fake.rot", "fake has no setting 'rot'", "did you mean 'root'?"),
        (["set", "fake.run_seconds", "soon"], "targets.fake.run_seconds", "(got 'soon')", "use a number"),
        (["set", "fake.run_seconds", "-1"], "targets.fake.run_seconds", "greater than or equal", "at least 0"),
        (["set", "fake.outcome", "maybe"], "targets.fake.outcome", "(got 'maybe')", "use one of"),
        (["set", "faek.root", "/r"], "targets.faek", "unknown target 'faek'", "did you mean 'fake'?"),
        (["set", "vertex.region", "Mars"], "targets.vertex.region", "not a Google Cloud region", "use one such as"),
        (["set", "databricks.host", "https://me:dapi0123456789abcdef@h.example"], "targets.databricks.host",
         "carries credentials in the URL", "remove the user:secret@ part"),
        (["set", "profiles.dev.fake.rot", "/r"], "profiles.dev.targets.fake.rot", "no setting", "did you mean"),
        (["get", "fake.rot"], "targets.fake.rot", "fake has no setting 'rot'", "did you mean 'root'?"),
        (["unset", "fake.rot"], "targets.fake.rot", "fake has no setting 'rot'", "did you mean 'root'?"),
    ],
)  # fmt: skip
def test_a_key_or_value_the_target_refuses_is_not_written(
    capsys: pytest.CaptureFixture[str], config: Path, argv: list[str], path: str, message: str, fix: str
) -> None:
    for as_json in (False, True):
        code, out, err = call(capsys, "config", *argv, *(["--json"] if as_json else []))
        assert code == 2
        assert "Traceback" not in err
        if as_json:
            [problem] = json.loads(out)["problems"]
        else:
            assert out == ""
            problem = {"path": err.split("\n  - ")[1].split(":")[0], "message": err, "fix": err}
        assert problem["path"] == path
        assert message in problem["message"]
        assert fix in problem["fix"]
        assert "dapi0123456789abcdef" not in out + err
    assert not config.exists()


def test_a_key_that_is_no_setting_can_still_be_removed(capsys: pytest.CaptureFixture[str], config: Path) -> None:
    """A typo in the file is fixed with `config unset`, since render refuses it."""
    config.parent.mkdir(parents=True)
    config.write_text('[targets.fake]\nroot = "/r"\nrot = "/r"\n')
    code, _, err = call(capsys, "config", "list")
    assert code == 2
    assert "targets.fake.rot: fake has no setting 'rot'" in err
    assert call(capsys, "config", "unset", "fake.rot")[0] == 0
    assert call(capsys, "config", "list")[:2] == (0, 'fake.root = "/r"\n')


def test_a_key_of_another_form_is_a_usage_error(capsys: pytest.CaptureFixture[str], config: Path) -> None:
    code, out, err = call(capsys, "config", "set", "region", "x", "--json")
    assert code == 2
    assert json.loads(out)["error"] == "UsageError"
    assert "write TARGET.SETTING (e.g. vertex.region), or profiles.NAME.TARGET.SETTING" in err
    assert call(capsys, "config")[0] == 2  # no action


def test_render_takes_the_config_files_values_under_the_job_file(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    job = tmp_path / "job.yaml"
    call(capsys, "config", "set", "fake.root", str(tmp_path / "from-config"))
    call(capsys, "config", "set", "fake.outcome", "failed")
    call(capsys, "config", "set", "fake.root", str(tmp_path / "from-dev"), "--profile", "dev")
    assert rendered(capsys, job)["root"] == str(tmp_path / "from-config")
    assert rendered(capsys, job, "--profile", "dev")["root"] == str(tmp_path / "from-dev")
    assert rendered(capsys, job, "--profile", "dev")["outcome"] == "failed"  # the defaults under the profile
    job.write_text(JOB + "targets:\n  fake: {outcome: succeeded}\n")
    assert rendered(capsys, job, "--profile", "dev")["outcome"] == "succeeded"  # the job file over both
    assert rendered(capsys, job, "--set", "outcome=failed")["outcome"] == "failed"


def test_a_profile_is_picked_by_the_environment_and_the_flag_wins(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    call(capsys, "config", "set", "profiles.dev.fake.root", str(tmp_path / "dev"))
    call(capsys, "config", "set", "profiles.prod.fake.root", str(tmp_path / "prod"))
    env = {**os.environ, "CROSSTRAIN_PROFILE": "prod"}
    for argv, root in (([], "prod"), (["--profile", "dev"], "dev")):
        done = subprocess.run(
            [sys.executable, "-m", "crosstrain.cli", "render", str(tmp_path / "job.yaml"), "-t", "fake", *argv],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["settings"]["root"] == str(tmp_path / root)


def test_an_unknown_profile_is_refused_with_the_ones_there_are(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    call(capsys, "config", "set", "profiles.dev.fake.outcome", "failed")
    for verb in ("render", "validate", "submit", "run"):
        code, out, err = call(capsys, verb, str(tmp_path / "job.yaml"), "-t", "fake", "--profile", "deev")
        assert code == 2, verb
        assert f"--profile: no profile 'deev' in {config}" in err
        assert "fix: did you mean 'dev'?" in err
    monkeypatch.setenv("CROSSTRAIN_PROFILE", "qa")
    code, out, err = call(capsys, "targets", "-t", "fake", "--json")
    assert code == 2
    assert json.loads(out)["problems"][0]["path"] == "$CROSSTRAIN_PROFILE"
    assert call(capsys, "config", "list")[0] == 0  # config's own actions read the file whatever the profile


def test_the_handle_verbs_take_the_profile(capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path) -> None:
    call(capsys, "config", "set", "fake.root", str(tmp_path / "cloud"), "--profile", "dev")
    code, handle, err = call(capsys, "submit", str(tmp_path / "job.yaml"), "-t", "fake", "--profile", "dev")
    assert code == 0, err
    assert (tmp_path / "cloud").is_dir()
    code, out, err = call(capsys, "status", handle.strip(), "--profile", "dev")
    assert (code, out.split("\t")[0]) == (0, "SUCCEEDED")
    code, out, err = call(capsys, "list", "-t", "fake", "--profile", "dev", "--json")
    assert [job["identity"] for job in json.loads(out)] == [json.loads(handle)["identity"]]


def test_targets_shows_each_values_origin(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    call(capsys, "config", "set", "fake.root", "/from/config")
    call(capsys, "config", "set", "fake.outcome", "failed")
    call(capsys, "config", "set", "fake.queue_seconds", "3")
    call(capsys, "config", "set", "fake.queue_seconds", "4", "--profile", "dev")
    job = tmp_path / "job.yaml"
    job.write_text(JOB + "targets:\n  fake: {run_seconds: 5}\n")
    code, out, err = call(capsys, "targets", "-t", "fake", "--json")
    assert code == 0, err
    origins = {s["name"]: (s["value"], s["origin"]) for s in json.loads(out)[0]["settings"]}
    assert origins["root"] == ("/from/config", f"config ({config})")
    assert origins["run_seconds"] == (0.0, "default")
    monkeypatch.setenv("CROSSTRAIN_FAKE_ROOT", "/from/env")
    code, out, err = call(capsys, "targets", str(job), "-t", "fake", "--profile", "dev", "--set", "outcome=succeeded")
    assert code == 0, err
    assert '  root (default "~/.cache/crosstrain/fake-cloud"): ' in out
    assert '      value: "/from/env" from env CROSSTRAIN_FAKE_ROOT\n' in out
    assert '      value: "succeeded" from --set\n' in out
    assert f"      value: 4.0 from profile dev ({config})\n" in out
    assert "      value: 5 from job file\n" in out
    assert "      set with: --set fake.root=..., targets.fake.root in the job file, $CROSSTRAIN_FAKE_ROOT, " in out
    assert "crosstrain config set fake.root VALUE" in out


def test_targets_shows_what_a_required_setting_lacks(capsys: pytest.CaptureFixture[str], config: Path) -> None:
    code, out, _ = call(capsys, "targets", "-t", "vertex")
    assert code == 0
    assert "  project (required): " in out
    assert "      value: not set\n" in out
    code, out, _ = call(capsys, "targets", "vertex")  # a target where a job file goes
    assert code == 2


def test_a_credential_in_the_config_file_is_never_shown(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    """No setting holds a secret (crosstrain refuses credentials in settings), and a value that carries one anyway
    is refused where it is checked and redacted where it is shown."""
    config.parent.mkdir(parents=True)
    config.write_text('[targets.databricks]\nhost = "https://me:dapi0123456789abcdef@h.example"\n')
    for argv, expected in (
        (["config", "list"], 2),
        (["config", "list", "--json"], 2),
        (["config", "get", "databricks.host"], 0),
        (["config", "get", "databricks.host", "--json"], 0),
        (["targets"], 2),
        (["targets", "-t", "databricks", "--json"], 2),
        (["render", str(tmp_path / "job.yaml"), "-t", "databricks"], 2),
    ):
        code, out, err = call(capsys, *argv)
        assert code == expected, argv
        assert "dapi0123456789abcdef" not in out + err, argv
        assert "Traceback" not in err
    assert call(capsys, "config", "get", "databricks.host")[1] == "https://***@h.example\n"


def test_a_bad_config_file_stops_every_verb_with_its_path_and_no_traceback(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    config.parent.mkdir(parents=True)
    config.write_text("[targets.fake]\nroot = \n")
    for argv in (
        ["render", str(tmp_path / "job.yaml"), "-t", "fake"],
        ["validate", str(tmp_path / "job.yaml"), "-t", "fake"],
        ["targets"],
        ["config", "list"],
        ["config", "set", "fake.root", "/r"],
    ):
        code, out, err = call(capsys, *argv, "--json")
        assert code == 2, argv
        report = json.loads(out)
        assert report["message"].startswith(f"invalid config file ({config}): 1 problem")
        assert report["problems"] == [
            {
                "path": "file",
                "message": "not TOML: Invalid value (at line 2, column 8)",
                "fix": report["problems"][0]["fix"],
            }
        ]
        assert "Traceback" not in err
    assert config.read_text() == "[targets.fake]\nroot = \n"


def test_completion_knows_config_and_its_actions(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = call(capsys, "completion", "bash")
    assert code == 0
    assert 'COMPREPLY=($(compgen -W "get set unset list path" -- "$cur")); return' in out
    assert 'get)\n                    opts="--help --json --profile -h" ;;' in out
    code, out, _ = call(capsys, "completion", "zsh")
    assert "if (( CURRENT == 3 )); then compadd get set unset list path; return; fi" in out
