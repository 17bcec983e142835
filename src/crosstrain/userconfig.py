"""This user's defaults for each target (a project, a region, a workspace, a staging bucket), as gcloud's
`config`, az's defaults and Databricks' profiles keep them: a TOML file, read where settings are resolved.

    [targets.vertex]                  # under every job's vertex settings
    project = "my-project"
    region = "europe-west4"

    [profiles.dev.targets.vertex]     # over them with --profile dev (or CROSSTRAIN_PROFILE=dev)
    project = "my-dev-project"

The file is `$CROSSTRAIN_CONFIG`, else `$XDG_CONFIG_HOME/crosstrain/config.toml`, else
`~/.config/crosstrain/config.toml` (beside `handle.key`, `crosstrain.seal`'s); one that does not exist is an
empty config. It is read within `untrusted.CONFIG`'s limits, once per backend, and its shape (tables, target and
profile names) is checked here; each target's keys and values are checked against that target's settings model
(`crosstrain.settings.config_problems`) where they are used, and all of them by `crosstrain config list`. Where
its values rank among the other sources is `crosstrain.settings.sourced`'s to say, in one place.

`set_value` and `unset_value` edit the file with tomlkit, which keeps its comments and layout, and replace it
atomically. TOML is parsed with the standard library's `tomllib` (tomlkit on Python 3.10), imported only when a
file exists: `import crosstrain` imports neither.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crosstrain.errors import ConfigError, Problem, SpecError, UsageError, closest
from crosstrain.frozen import frozen

if TYPE_CHECKING:
    from tomlkit import TOMLDocument

    from crosstrain.settings import TargetSettings

CONFIG_ENV = "CROSSTRAIN_CONFIG"
PROFILE_ENV = "CROSSTRAIN_PROFILE"
FILE_NAME = "config.toml"
#: What a profile's or a target's name may be, so that `config set profiles.NAME.TARGET.KEY` can name it.
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
LAYOUT = (
    "a config file holds [targets.TARGET] tables of settings, and [profiles.NAME.targets.TARGET] tables "
    "(see `crosstrain config --help`)"
)


def user_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """crosstrain's folder for this user: `$XDG_CONFIG_HOME/crosstrain`, else `~/.config/crosstrain`.

    In an environment given explicitly (`environ={}` in a test, a conformance check) only what it names counts:
    one with neither variable has no folder, so nothing of the user's own reaches such a render."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME")
    if not base:
        home = env.get("HOME") or (os.path.expanduser("~") if env is os.environ else "")
        if not home or home == "~":
            return None
        base = os.path.join(home, ".config")
    return Path(base) / "crosstrain"


def config_path(environ: Mapping[str, str] | None = None) -> tuple[Path | None, str]:
    """Where this user's config file is, and what says so (`$CROSSTRAIN_CONFIG`, `$XDG_CONFIG_HOME`, the
    default); None where an explicit environment names no home."""
    env = os.environ if environ is None else environ
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]), f"${CONFIG_ENV}"
    folder = user_dir(env)
    if folder is None:
        return None, "no home folder in the environment"
    return folder / FILE_NAME, "$XDG_CONFIG_HOME" if env.get("XDG_CONFIG_HOME") else "the default"


def shown(path: Path | None, environ: Mapping[str, str] | None = None) -> str:
    """A path for messages, the home folder as `~`."""
    if path is None:
        return "no config file"
    env = os.environ if environ is None else environ
    home = env.get("HOME") or ""
    text = str(path)
    if home and home != "/" and (text == home or text.startswith(home.rstrip("/") + "/")):
        return "~" + text[len(home.rstrip("/")) :]
    return text


@frozen
class Layer:
    """One table of one target's settings in the config file: its values, where it is, what to call it."""

    target: str
    at: str  # its key path in the file: targets.vertex, profiles.dev.targets.vertex
    origin: str  # as `crosstrain targets` shows it: "config (~/.config/crosstrain/config.toml)", "profile dev (...)"
    source: str  # the file, for messages
    values: Mapping[str, Any]


@frozen
class UserConfig:
    """The config file as read (plain data, its shape checked), and the profile in use."""

    path: Path | None
    data: Mapping[str, Any] = field(default_factory=dict)
    profile: str | None = None
    source: str = "no config file"

    def layers(self, target: str) -> tuple[Layer, ...]:
        """The tables that hold `target`'s settings, lowest first: the defaults, then the profile's."""
        found = []
        table = self.data.get("targets", {}).get(target)
        if table:
            found.append(Layer(target, f"targets.{target}", f"config ({self.source})", self.source, table))
        if self.profile is not None:
            table = self.data["profiles"][self.profile].get("targets", {}).get(target)
            if table:
                at = f"profiles.{self.profile}.targets.{target}"
                found.append(Layer(target, at, f"profile {self.profile} ({self.source})", self.source, table))
        return tuple(found)

    def all_layers(self) -> Iterator[Layer]:
        """Every table of settings in the file, each profile's too (for `crosstrain config list`)."""
        for target, table in self.data.get("targets", {}).items():
            yield Layer(target, f"targets.{target}", f"config ({self.source})", self.source, table)
        for name, profile in self.data.get("profiles", {}).items():
            for target, table in profile.get("targets", {}).items():
                at = f"profiles.{name}.targets.{target}"
                yield Layer(target, at, f"profile {name} ({self.source})", self.source, table)

    @property
    def profiles(self) -> list[str]:
        return list(self.data.get("profiles", {}))


def load(
    environ: Mapping[str, str] | None = None,
    profile: str | None = None,
    *,
    profile_from: str = "--profile",
    ambient: bool = True,
) -> UserConfig:
    """This user's config file, and the profile in use: `profile`, else `$CROSSTRAIN_PROFILE` (unless not
    `ambient`: `crosstrain config` edits what its keys name). A file that is not TOML, a table out of place, an
    unknown target or profile: `ConfigError`, naming the file and the key."""
    env = os.environ if environ is None else environ
    path, _ = config_path(env)
    if not profile and ambient and env.get(PROFILE_ENV):
        profile, profile_from = env[PROFILE_ENV], f"${PROFILE_ENV}"
    source = shown(path, env)
    data = read(path, source) if path is not None else {}
    problems = shape_problems(data)
    if problems:
        raise ConfigError(problems, source=source)
    if profile and profile not in data.get("profiles", {}):
        problem = _unknown_profile(profile, profile_from, list(data.get("profiles", {})), source)
        raise ConfigError([problem], headline="unknown config profile")
    return UserConfig(path, data, profile or None, source)


def _unknown_profile(profile: str, given: str, profiles: list[str], source: str) -> Problem:
    close = closest(profile, profiles)
    if close:
        fix = f"did you mean {close!r}? The profiles: {', '.join(profiles)}"
    elif profiles:
        fix = f"use one of the profiles: {', '.join(profiles)}"
    else:
        fix = f"{source} has no profile: make one with `crosstrain config set profiles.{profile}.TARGET.SETTING VALUE`"
    if given == "--profile":  # a Databricks user may mean the ~/.databrickscfg profile
        fix += " (a ~/.databrickscfg profile is a databricks setting: --set profile=NAME)"
    return Problem(given, f"no profile {_quoted(profile)} in {source}", fix)


def read(path: Path, source: str) -> dict[str, Any]:
    """The file's data, {} where there is no file; refused past `untrusted.CONFIG`'s limits or when not TOML."""
    if not os.path.lexists(path):  # a dangling link is read, and said to be one
        return {}
    from crosstrain import untrusted

    text, _ = untrusted.read_text(path, untrusted.CONFIG)
    return parse(text, source)


def parse(text: str, source: str) -> dict[str, Any]:
    """TOML text -> plain data, within `untrusted.CONFIG`'s depth, value and string limits."""
    loads = _toml_reader()
    try:
        data = loads(text)
    except RecursionError:
        raise _refused(source, "nested too deeply", "a config file holds a few flat tables") from None
    except ValueError as exc:  # tomllib.TOMLDecodeError and tomlkit's ParseError are ValueErrors
        raise _refused(
            source, f"not TOML: {exc}", 'fix the file at that line (TOML: `key = "value"` under [table] headers)'
        ) from None
    _check_limits(data, source)
    return data


def _toml_reader() -> Callable[[str], dict[str, Any]]:
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib.loads
    return _tomlkit_loads  # pragma: no cover - Python 3.10


def _tomlkit_loads(text: str) -> dict[str, Any]:
    """Python 3.10 has no tomllib: tomlkit, which edits the file, reads it there (as plain data)."""
    import tomlkit

    return dict(tomlkit.loads(text).unwrap())


def _refused(source: str, message: str, fix: str) -> ConfigError:
    return ConfigError([Problem("file", message, fix)], source=source)


def _check_limits(data: Any, source: str) -> None:
    from crosstrain import untrusted

    limits = untrusted.CONFIG
    stack: list[tuple[Any, int]] = [(data, 1)]
    count = 0
    while stack:
        item, depth = stack.pop()
        count += 1
        if depth > limits.max_depth or count > limits.max_nodes:
            what = f"nested more than {limits.max_depth} deep" if depth > limits.max_depth else "too many values"
            raise _refused(source, f"{what} (the limit for a config file)", "a config file holds a few flat tables")
        if isinstance(item, str) and len(item) > limits.max_string:
            raise _refused(
                source,
                f"a string of {len(item):,} characters: {untrusted.excerpt(item)}",
                f"a setting is shorter than {limits.max_string:,} characters",
            )
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children)


def shape_problems(data: Mapping[str, Any]) -> list[Problem]:
    """Where the file's tables are not where crosstrain reads them, or name a target that does not exist."""
    problems = []
    for key, value in data.items():
        if key == "targets":
            problems += _targets_problems(value, "targets")
        elif key == "profiles":
            if not isinstance(value, dict):
                problems.append(_not_table("profiles", value, "[profiles.NAME.targets.TARGET]"))
                continue
            for name, profile in value.items():
                at = f"profiles.{_key(name)}"
                if not NAME.fullmatch(name):
                    problems.append(Problem(at, f"{_quoted(name)} is not a profile name", _NAME_FIX))
                elif not isinstance(profile, dict):
                    problems.append(_not_table(at, profile, f"[{at}.targets.TARGET]"))
                else:
                    for inner, table in profile.items():
                        if inner == "targets":
                            problems += _targets_problems(table, f"{at}.targets")
                        else:
                            problems.append(_misplaced(f"{at}.{_key(inner)}", inner, f"{at}.targets", ("targets",)))
        else:
            problems.append(_misplaced(_key(key), key, "targets", ("targets", "profiles")))
    return problems


_NAME_FIX = "use letters, digits, - and _"


def _targets_problems(value: Any, at: str) -> list[Problem]:
    if not isinstance(value, dict):
        return [_not_table(at, value, f"[{at}.TARGET]")]
    problems = []
    for target, table in value.items():
        where = f"{at}.{_key(target)}"
        unknown = unknown_target(target)
        if unknown:
            problems.append(Problem(where, f"unknown target {_quoted(target)}", unknown))
        elif not isinstance(table, dict):
            problems.append(_not_table(where, table, f"[{where}] with one `setting = value` line each"))
    return problems


def _misplaced(at: str, key: str, parent: str, known: tuple[str, ...]) -> Problem:
    """A key where crosstrain reads none: a target's table a level too high (`[vertex]`), or a typo."""
    if not unknown_target(key):
        return Problem(at, f"{_quoted(key)} is a target: its settings go under [{parent}.{key}]", "move them there")
    close = closest(key, known)
    hint = f"did you mean {close!r}? " if close else ""
    return Problem(at, f"unknown key {_quoted(key)}", hint + LAYOUT)


def _not_table(at: str, value: Any, form: str) -> Problem:
    from crosstrain import untrusted

    return Problem(at, f"must be a table, not {untrusted.excerpt(value)}", f"write it as {form}")


def unknown_target(name: str) -> str:
    """'' for a target crosstrain knows; else the fix: the closest name, or all of them."""
    from crosstrain import registry

    if name in registry.BUILTIN_BACKENDS:
        return ""
    known = registry.entries()  # plugins too (an entry-point scan: only for a name that is not built in)
    if name in known:
        return ""
    close = closest(name, known)
    return f"did you mean {close!r}?" if close else f"use one of {', '.join(sorted(known))}"


def _quoted(text: str) -> str:
    from crosstrain import untrusted

    return untrusted.excerpt(text, 40)


def _key(text: str) -> str:
    """A key as a path shows it: bare where TOML allows, else quoted."""
    return text if NAME.fullmatch(text) else _quoted(text)


# --- keys on the command line ----------------------------------------------------------------------------


@frozen
class Key:
    """One setting's place in the file: `targets.TARGET.SETTING`, or a profile's."""

    target: str
    setting: str
    profile: str | None = None

    @property
    def table(self) -> tuple[str, ...]:
        return ("profiles", self.profile, "targets", self.target) if self.profile else ("targets", self.target)

    def __str__(self) -> str:
        return ".".join((*self.table, self.setting))


KEY_FORM = "TARGET.SETTING (e.g. vertex.region), or profiles.NAME.TARGET.SETTING for a profile's"


def parse_key(text: str, profile: str | None = None) -> Key:
    """`vertex.region`, `profiles.dev.vertex.region` (or the file's own `targets.vertex.region`,
    `profiles.dev.targets.vertex.region`); `profile` (`--profile`) places a plain key in that profile."""
    parts = text.split(".")
    named = None
    if parts[0] == "profiles" and len(parts) >= 4:
        named, parts = parts[1], parts[2:]
    if parts[0] == "targets" and len(parts) == 3:
        parts = parts[1:]
    if len(parts) != 2 or not all(parts):
        raise UsageError(f"{_quoted(text)} is not a setting's key: write {KEY_FORM}")
    if named is not None and profile is not None and named != profile:
        raise UsageError(f"{_quoted(text)} is in profile {named!r}, and --profile says {profile!r}: pass one of them")
    profile = named or profile
    if profile is not None and not NAME.fullmatch(profile):
        raise UsageError(f"{_quoted(profile)} is not a profile name: {_NAME_FIX}")
    target, setting = parts
    return Key(target, setting.replace("-", "_"), profile)


# --- editing ---------------------------------------------------------------------------------------------


def set_value(path: Path, key: Key, value: Any) -> None:
    """Write `key = value` into the file (made if need be), keeping the rest of it as it is."""

    def change(doc: TOMLDocument) -> None:
        import tomlkit

        table: Any = doc
        for i, part in enumerate(key.table):
            if part not in table:
                last = i == len(key.table) - 1
                table[part] = tomlkit.table(is_super_table=not last)  # [profiles.dev.targets.vertex], no [profiles]
            table = table[part]
            if not isinstance(table, dict):
                raise ConfigError([_not_table(".".join(key.table[: i + 1]), table, "a table")], source=shown(path))
        table[key.setting] = value

    _edit(path, change)


def unset_value(path: Path, key: Key) -> bool:
    """Remove `key` from the file, and the tables it leaves empty; False where it was not set."""
    removed = False

    def change(doc: TOMLDocument) -> None:
        nonlocal removed
        tables: list[Any] = [doc]
        for part in key.table:
            inner = tables[-1].get(part) if isinstance(tables[-1], dict) else None
            if not isinstance(inner, dict):
                return
            tables.append(inner)
        if key.setting not in tables[-1]:
            return
        del tables[-1][key.setting]
        removed = True
        for parent, part, table in reversed(list(zip(tables[:-1], key.table, tables[1:], strict=True))):
            if table:
                break
            del parent[part]

    if os.path.lexists(path):
        _edit(path, change)
    return removed


def model_for(key: Key, *, stored: bool = False) -> type[TargetSettings]:
    """The settings model of `key`'s target. An unknown target, or (where the file does not hold it: a typo
    there can still be read and removed) a setting it does not have, is refused with the closest name."""
    from crosstrain.registry import get_backend_class
    from crosstrain.settings import check_setting

    table = ".".join(key.table)
    unknown = unknown_target(key.target)
    if unknown:
        raise SpecError([Problem(table, f"unknown target {key.target!r}", unknown)], headline="invalid config key")
    model = get_backend_class(key.target).settings_model
    if not stored and key.setting not in model.model_fields:
        problems = check_setting(model, key.target, key.setting, None, at=table)[1]
        raise SpecError(problems, headline="invalid config key")
    return model


def value_for(model: type[TargetSettings], key: Key, text: str) -> Any:
    """`text` (from the command line) as the target's setting takes it, and as TOML writes it: a number stays a
    number, `true` a boolean, a patch's JSON a table."""
    from pydantic_core import to_jsonable_python

    from crosstrain.settings import check_setting

    checked, problems = check_setting(model, key.target, key.setting, text, at=".".join(key.table))
    if problems:
        raise SpecError(problems, headline=f"cannot set {key}")
    value = to_jsonable_python(checked)
    if value is None:
        raise SpecError([Problem(str(key), "TOML has no null", f"to leave it unset: crosstrain config unset {key}")])
    return value


def listing(config: UserConfig) -> dict[str, Any]:
    """Every key the file sets, in the form `crosstrain config get` takes (`vertex.region`,
    `profiles.dev.vertex.region`), once each table is checked against its target's settings."""
    from crosstrain.registry import get_backend_class
    from crosstrain.settings import config_problems

    layers = list(config.all_layers())
    problems = [p for layer in layers for p in config_problems(get_backend_class(layer.target).settings_model, [layer])]
    if problems:
        raise ConfigError(problems, source=config.source)
    values = {}
    for layer in layers:
        short = layer.at.removeprefix("targets.").replace(".targets.", ".", 1)
        values.update({f"{short}.{name}": value for name, value in layer.values.items()})
    return values


def stored(config: UserConfig, key: Key) -> tuple[bool, Any]:
    """Whether the file sets `key`, and its value."""
    table: Any = config.data
    for part in key.table:
        table = table.get(part) if isinstance(table, dict) else None
    if isinstance(table, dict) and key.setting in table:
        return True, table[key.setting]
    return False, None


def _edit(path: Path, change: Callable[[TOMLDocument], None]) -> None:
    """Read, change and write the file whole (a new file beside it, renamed over it), where it lies: through a
    link (dotfiles kept in a repository), with its own permissions."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    from crosstrain import untrusted

    real = path.resolve()
    source = shown(path)
    text = untrusted.read_text(real, untrusted.CONFIG)[0] if os.path.lexists(path) else ""
    parse(text, source)  # the same refusals as reading (not TOML, past a limit), before anything changes
    try:
        doc = tomlkit.parse(text)
    except (TOMLKitError, ValueError) as exc:  # pragma: no cover - what tomllib reads, tomlkit reads
        raise _refused(source, f"not TOML: {exc}", "fix the file at that line") from None
    change(doc)
    out = tomlkit.dumps(doc)
    if len(out.encode()) > untrusted.CONFIG.max_bytes:
        raise _refused(source, "would grow past 256 KiB, the limit for a config file", "keep settings short")
    _replace(real, out)


def _replace(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = 0o600  # the user's own: nothing else needs to read it
    import tempfile  # here: a render reads the config file, and only a write needs it

    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8", newline="") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
