"""This user's config file: where it is, what it may hold, every way it can be wrong, and edits that keep the
rest of it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from crosstrain import userconfig
from crosstrain.errors import SpecError, UsageError
from crosstrain.seal import key_path
from crosstrain.userconfig import Key, config_path, load, parse_key, set_value, unset_value


def test_its_place_is_crosstrain_config_else_xdg_else_home(tmp_path: Path) -> None:
    home, xdg, named = str(tmp_path / "home"), str(tmp_path / "xdg"), str(tmp_path / "mine.toml")
    assert config_path({"HOME": home}) == (Path(home, ".config", "crosstrain", "config.toml"), "the default")
    assert config_path({"HOME": home, "XDG_CONFIG_HOME": xdg}) == (
        Path(xdg, "crosstrain", "config.toml"),
        "$XDG_CONFIG_HOME",
    )
    assert config_path({"HOME": home, "XDG_CONFIG_HOME": xdg, "CROSSTRAIN_CONFIG": named})[0] == Path(named)


def test_an_environment_given_without_a_home_has_no_config_file() -> None:
    """`environ={}` (a test, the conformance suite) reads nothing of the user's own."""
    assert config_path({})[0] is None
    assert load({}) == userconfig.UserConfig(None)


def test_it_lies_beside_the_handle_key() -> None:
    path, _ = config_path()
    assert path is not None
    assert os.environ["XDG_CONFIG_HOME"] in str(key_path())  # the tests' own folder (tests/conftest.py)
    assert key_path().parent == Path(os.environ["XDG_CONFIG_HOME"], "crosstrain")


def test_no_file_is_an_empty_config(tmp_path: Path) -> None:
    config = load({"CROSSTRAIN_CONFIG": str(tmp_path / "none.toml")})
    assert config.data == {}
    assert config.layers("vertex") == ()


def refusal(tmp_path: Path, content: str | bytes, profile: str | None = None) -> SpecError:
    path = tmp_path / "config.toml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(SpecError) as err:
        load({"CROSSTRAIN_CONFIG": str(path)}, profile)
    return err.value


@pytest.mark.parametrize(
    ("content", "path", "message", "fix"),
    [
        ("[targets.vertex\nproject = 'p'\n", "file", "not TOML: ", "fix the file at that line"),
        ("region = \n", "file", "(at line 1, column 10)", "fix the file at that line"),
        (b"[targets.vertex]\nproject = 'p\x00'\n", "file", "a NUL byte at line 2", "is UTF-8 text"),
        (b"\xff\xfe\x00\x01garbage", "file", "not UTF-16 text", "save the config file as UTF-8"),
        ("a = " + "[" * 100 + "]" * 100 + "\n", "file", "nested more than 16 deep", "a few flat tables"),
        ("a = " + "[" * 50_000 + "]" * 50_000 + "\n", "file", "nested too deeply", "a few flat tables"),
        ('a = "' + "x" * 70_000 + '"\n', "file", "a string of 70,000 characters", "shorter than"),
        ("x = '" + "y" * 300_000 + "'\n", "file", "larger than 256 KiB", "is the file you meant"),
        ("[vertex]\nproject = 'p'\n", "vertex", "'vertex' is a target: its settings go under [targets.vertex]", "move"),
        ("[target.vertex]\n", "target", "unknown key 'target'", "did you mean 'targets'?"),
        ("project = 'p'\n", "project", "unknown key 'project'", "a config file holds [targets.TARGET] tables"),
        ("[targets.vertx]\nproject = 'p'\n", "targets.vertx", "unknown target 'vertx'", "did you mean 'vertex'?"),
        ("[targets]\nvertex = 'p'\n", "targets.vertex", "must be a table, not 'p'", "write it as [targets.vertex]"),
        ("targets = 3\n", "targets", "must be a table, not 3", "write it as [targets.TARGET]"),
        ("[profiles.dev.vertex]\n", "profiles.dev.vertex", "under [profiles.dev.targets.vertex]", "move"),
        ("[profiles.dev.target.vertex]\n", "profiles.dev.target", "unknown key", "did you mean 'targets'?"),
        ('[profiles."a.b".targets.vertex]\n', "profiles.'a.b'", "is not a profile name", "letters, digits"),
        ("profiles = []\n", "profiles", "must be a table, not []", "[profiles.NAME.targets.TARGET]"),
    ],
)
def test_a_bad_file_is_refused_naming_the_file_the_key_and_the_fix(
    tmp_path: Path, content: str | bytes, path: str, message: str, fix: str
) -> None:
    err = refusal(tmp_path, content)
    assert str(err).startswith(f"invalid config file ({tmp_path / 'config.toml'})")
    [problem] = err.problems
    assert problem.path == path
    assert message in problem.message
    assert fix in problem.fix


def test_every_problem_with_the_files_shape_is_said_at_once(tmp_path: Path) -> None:
    err = refusal(tmp_path, "[vertex]\n[targets.vertx]\n[profiles.dev.azureml]\n")
    assert [p.path for p in err.problems] == ["vertex", "targets.vertx", "profiles.dev.azureml"]


def test_a_folder_or_a_dangling_link_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="is a directory"):
        load({"CROSSTRAIN_CONFIG": str(tmp_path)})
    (tmp_path / "link.toml").symlink_to(tmp_path / "gone.toml")
    with pytest.raises(SpecError, match="no such file"):
        load({"CROSSTRAIN_CONFIG": str(tmp_path / "link.toml")})


CONFIG = """\
[targets.vertex]
project = "p"

[profiles.dev.targets.vertex]
project = "p-dev"

[profiles.prod.targets.vertex]
project = "p-prod"
"""


def test_an_unknown_profile_names_the_closest_and_every_profile(tmp_path: Path) -> None:
    [problem] = refusal(tmp_path, CONFIG, profile="deev").problems
    assert (problem.path, problem.message) == ("--profile", f"no profile 'deev' in {tmp_path / 'config.toml'}")
    assert problem.fix.startswith("did you mean 'dev'? The profiles: dev, prod")
    assert "--set profile=NAME" in problem.fix  # a Databricks user's profile is a setting
    [problem] = refusal(tmp_path, CONFIG, profile="staging").problems
    assert problem.fix.startswith("use one of the profiles: dev, prod")
    [problem] = refusal(tmp_path, "", profile="dev").problems
    assert "has no profile: make one with `crosstrain config set profiles.dev.TARGET.SETTING VALUE`" in problem.fix


def test_the_profile_comes_from_the_environment_too(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    environ = {"CROSSTRAIN_CONFIG": str(path), "CROSSTRAIN_PROFILE": "prod"}
    assert [layer.values["project"] for layer in load(environ).layers("vertex")] == ["p", "p-prod"]
    assert [layer.values["project"] for layer in load(environ, "dev").layers("vertex")] == ["p", "p-dev"]  # the flag
    with pytest.raises(SpecError) as err:
        load({**environ, "CROSSTRAIN_PROFILE": "qa"})
    assert err.value.problems[0].path == "$CROSSTRAIN_PROFILE"
    assert str(err.value).startswith("unknown config profile")


@pytest.mark.parametrize(
    ("text", "profile", "key"),
    [
        ("vertex.region", None, Key("vertex", "region")),
        ("targets.vertex.region", None, Key("vertex", "region")),
        ("vertex.staging-bucket", None, Key("vertex", "staging_bucket")),
        ("vertex.region", "dev", Key("vertex", "region", "dev")),
        ("profiles.dev.vertex.region", None, Key("vertex", "region", "dev")),
        ("profiles.dev.targets.vertex.region", "dev", Key("vertex", "region", "dev")),
    ],
)
def test_keys_are_target_dot_setting_or_a_profiles(text: str, profile: str | None, key: Key) -> None:
    assert parse_key(text, profile) == key
    assert str(key) == ".".join((*key.table, key.setting))


@pytest.mark.parametrize(
    ("text", "profile", "message"),
    [
        ("region", None, "'region' is not a setting's key: write TARGET.SETTING"),
        ("vertex.", None, "is not a setting's key"),
        ("a.b.c", None, "is not a setting's key"),
        ("profiles.dev.vertex.region", "prod", "is in profile 'dev', and --profile says 'prod'"),
        ("vertex.region", "my profile", "is not a profile name"),
    ],
)
def test_a_key_of_another_form_is_refused(text: str, profile: str | None, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("[", r"\[").replace(".", r"\.")):
        parse_key(text, profile)


COMMENTED = """\
# my defaults
[targets.vertex]
project = "p"  # the team's

[targets.azureml]
workspace = "ws"
"""


def test_set_keeps_the_rest_of_the_file_comments_included(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(COMMENTED)
    set_value(path, Key("vertex", "region"), "europe-west4")
    set_value(path, Key("vertex", "project", "dev"), "p-dev")
    set_value(path, Key("vertex", "project"), "q")
    text = path.read_text()
    assert text.startswith('# my defaults\n[targets.vertex]\nproject = "q"  # the team\'s\nregion = "europe-west4"\n')
    assert '[targets.azureml]\nworkspace = "ws"\n' in text
    assert '[profiles.dev.targets.vertex]\nproject = "p-dev"\n' in text
    assert "[profiles]" not in text  # one header per table of settings
    assert load({"CROSSTRAIN_CONFIG": str(path)}, "dev").data == {
        "targets": {"vertex": {"project": "q", "region": "europe-west4"}, "azureml": {"workspace": "ws"}},
        "profiles": {"dev": {"targets": {"vertex": {"project": "p-dev"}}}},
    }


def test_unset_removes_the_key_and_the_tables_it_leaves_empty(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(COMMENTED + '\n[profiles.dev.targets.vertex]\nproject = "p-dev"\n')
    assert unset_value(path, Key("vertex", "project", "dev"))
    assert "profiles" not in path.read_text()
    assert not unset_value(path, Key("vertex", "project", "dev"))  # not there: nothing changes
    assert unset_value(path, Key("azureml", "workspace"))
    assert path.read_text() == '# my defaults\n[targets.vertex]\nproject = "p"  # the team\'s\n\n'
    assert not unset_value(tmp_path / "none.toml", Key("vertex", "project"))
    assert not (tmp_path / "none.toml").exists()


def test_a_new_file_is_the_users_alone_and_an_old_one_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "made" / "here" / "config.toml"
    set_value(path, Key("vertex", "project"), "p")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)
    set_value(path, Key("vertex", "region"), "us-east1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(os.listdir(path.parent)) == ["config.toml"]  # no temporary file left beside it


def test_a_linked_file_is_edited_where_it_lies(tmp_path: Path) -> None:
    """Dotfiles kept in a repository and linked into ~/.config stay linked."""
    real = tmp_path / "dotfiles" / "crosstrain.toml"
    real.parent.mkdir()
    real.write_text(COMMENTED)
    link = tmp_path / "config.toml"
    link.symlink_to(real)
    set_value(link, Key("vertex", "region"), "us-east1")
    assert link.is_symlink()
    assert 'region = "us-east1"' in real.read_text()


def test_a_file_that_is_not_toml_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[targets.vertex\n")
    with pytest.raises(SpecError, match="not TOML"):
        set_value(path, Key("vertex", "region"), "us-east1")
    assert path.read_text() == "[targets.vertex\n"


def test_a_file_past_its_limit_is_not_written(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("".join(f"[targets.fake]\n# {'x' * 100}\n" if i == 0 else f"# {'x' * 100}\n" for i in range(2500)))
    with pytest.raises(SpecError, match="would grow past 256 KiB"):
        set_value(path, Key("fake", "root"), "r" * 60_000)
    assert "root" not in path.read_text()


def test_python_3_10_reads_the_file_with_tomlkit_as_3_11_does_with_tomllib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python 3.10 has no tomllib: tomlkit reads the file there, to the same data and the same refusals."""
    path = tmp_path / "config.toml"
    path.write_text(COMMENTED + "\n[profiles.dev.targets.fake]\nrun_seconds = 1.5\npatch = {a = [1, true]}\n")
    environ = {"CROSSTRAIN_CONFIG": str(path)}
    expected = load(environ).data
    monkeypatch.setattr(userconfig, "_toml_reader", lambda: userconfig._tomlkit_loads)
    assert load(environ).data == expected
    assert type(load(environ).data["targets"]["vertex"]) is dict  # plain data, not tomlkit's items
    for bad in ("region = \n", "a = " + "[" * 50_000 + "]" * 50_000 + "\n"):
        path.write_text(bad)
        with pytest.raises(SpecError, match=r"not TOML|nested too deeply"):
            load(environ)
