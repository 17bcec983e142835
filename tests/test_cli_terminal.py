"""What a person sees, verb by verb: each runs under a pseudo-terminal (colour, headers, aligned columns) and in a
pipe (no escape codes at all), `NO_COLOR` turns the colour off on a terminal, and `--json` is the same bytes on a
terminal as in a pipe."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from crosstrain import colour
from tests.conftest import drained

#: A colour or weight (SGR), not the cursor control that rewrites the live progress line.
SGR = re.compile(r"\x1b\[[0-9;]*m")
GOOD = "name: c\ncommand: python -c \"print('rank output')\"\n"


def on_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """The verb's exit code and what its terminal shows (stdout and stderr both on the pseudo-terminal)."""
    import pty

    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "crosstrain.cli", *argv], stdout=secondary, stderr=secondary, env=env
    )
    os.close(secondary)
    seen = drained(primary, process, 0.1)
    return process.wait(timeout=60), seen.decode().replace("\r\n", "\n")


def in_pipe(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "crosstrain.cli", *argv], capture_output=True, text=True, env=env, timeout=60
    )
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def world(tmp_path: Path, fake_root: Path) -> tuple[dict[str, str], Path, str]:
    """An environment (the fake cloud, no colour preference, a config file of its own), a job file, and the
    handle of a job on the fake cloud that has SUCCEEDED."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update({"CROSSTRAIN_FAKE_ROOT": str(fake_root), "TERM": "xterm", "CROSSTRAIN_CONFIG": str(tmp_path / "c.toml")})
    job = tmp_path / "job.yaml"
    job.write_text(GOOD)
    code, out, err = in_pipe(["submit", str(job), "-t", "fake", "--wait"], env)
    assert code == 0, err
    return env, job, out.strip()  # submit's result is the handle


def verbs(job: Path, handle: str) -> dict[str, list[str]]:
    return {
        "render": ["render", str(job), "-t", "fake"],
        "validate": ["validate", str(job), "-t", "fake"],
        "submit": ["submit", str(job), "-t", "fake", "--dry-run"],
        "status": ["status", handle],
        "wait": ["wait", handle],
        "list": ["list", "-t", "fake"],
        "cancel": ["cancel", handle],
        "logs": ["logs", handle],
        "schema": ["schema"],
        "targets": ["targets"],
        "config": ["config", "list"],
        "completion": ["completion", "bash"],
        "catalog": ["catalog", "-t", "vertex"],
        "an error": ["render", str(job), "-t", "nowhere"],
    }


def plain(text: str) -> str:
    return SGR.sub("", text)


def words(text: str) -> list[str]:
    return [re.sub(r"^\d+(?:\.\d+)?[smh]$", "<duration>", word) for word in text.split()]


#: What colour each verb shows on a terminal, where it has any: a predicate over the terminal's text.
COLOURED: dict[str, Callable[[str], bool]] = {
    "status": lambda seen: f"{colour.GREEN}SUCCEEDED{colour.RESET}" in seen,
    "wait": lambda seen: f"{colour.GREEN}SUCCEEDED{colour.RESET}" in seen,
    "list": lambda seen: f"{colour.BOLD}IDENTITY" in seen and f"{colour.GREEN}SUCCEEDED" in seen,
    "catalog": lambda seen: f"{colour.BOLD}TARGET" in seen,
    "an error": lambda seen: f"{colour.BOLD}{colour.RED}crosstrain render:{colour.RESET}" in seen,
}


@pytest.mark.parametrize(
    "verb",
    ["render", "validate", "submit", "status", "wait", "list", "cancel", "logs", "schema", "targets", "config",
     "completion", "catalog", "an error"],
)  # fmt: skip
def test_colour_on_a_terminal_only_and_never_under_no_color(verb: str, world: tuple[dict[str, str], Path, str]) -> None:
    env, job, handle = world
    argv = verbs(job, handle)[verb]
    code, seen = on_terminal(argv, env)
    piped_code, out, err = in_pipe(argv, env)
    assert code == piped_code, seen
    assert not SGR.search(out + err), f"{verb}: escape codes in a pipe"
    if verb in COLOURED:
        assert COLOURED[verb](seen), f"{verb}: {seen[-2000:]!r}"
    _, uncoloured = on_terminal(argv, {**env, "NO_COLOR": "1"})
    assert not SGR.search(uncoloured), f"{verb}: colour despite NO_COLOR"
    if verb not in ("wait", "submit"):  # the same words, less colour (a duration may have ticked on)
        assert words(plain(seen)) == words(uncoloured)


def test_tables_line_up_on_a_terminal(world: tuple[dict[str, str], Path, str]) -> None:
    env, _, _ = world
    for argv, header, column in (
        (["list", "-t", "fake"], ["IDENTITY", "STATE", "CREATED", "CONSOLE", "HANDLE"], "STATE"),
        (["catalog", "-t", "vertex"], ["TARGET", "GPUS", "MACHINE", "TYPES", "ACCELERATOR"], "MACHINE TYPES"),
    ):
        code, seen = on_terminal(argv, env)
        assert code == 0
        lines = plain(seen).splitlines()
        assert lines[0].split() == header
        starts = {line.index(line.split("  ")[0]) for line in lines}
        assert starts == {0}
        at = lines[0].index(column)
        assert all(line[at - 1] == " " and line[at] != " " for line in lines[1:] if len(line) > at), argv


@pytest.mark.parametrize(
    "argv", [["status", "{handle}", "--json"], ["list", "-t", "fake", "--json"], ["catalog", "--json"]]
)
def test_json_is_the_same_on_a_terminal_as_in_a_pipe(argv: list[str], world: tuple[dict[str, str], Path, str]) -> None:
    env, _, handle = world
    argv = [a.replace("{handle}", handle) for a in argv]
    _, seen = on_terminal(argv, env)
    _, out, _ = in_pipe(argv, env)
    assert json.loads(seen) == json.loads(out)
    assert not SGR.search(seen)
