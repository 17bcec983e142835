"""The parser built for one verb is, for that verb, the parser built whole."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from crosstrain.cli import COMMANDS
from crosstrain.cli_parser import Parser, build_parser


def _verb_parser(parser: argparse.ArgumentParser, verb: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = action.choices[verb]
    return found


def _described(parser: argparse.ArgumentParser) -> list[Any]:
    """Every option and positional of a parser, its sub-parsers' included, as what parsing and help read."""
    described: list[Any] = [parser.prog, parser.description, parser.epilog]
    for action in parser._actions:
        fields = ("option_strings", "dest", "nargs", "default", "type", "choices", "required", "help", "metavar")
        described.append(tuple(repr(getattr(action, name)) for name in fields))
        if isinstance(action, argparse._SubParsersAction):
            described += [(name, _described(sub)) for name, sub in action.choices.items()]
    return described


@pytest.mark.parametrize("verb", sorted(COMMANDS))
def test_a_verb_s_parser_is_the_whole_parser_s(verb: str) -> None:
    whole, built = build_parser(), build_parser(verb)
    assert _described(_verb_parser(built, verb)) == _described(_verb_parser(whole, verb))
    assert _verb_parser(built, verb).format_help() == _verb_parser(whole, verb).format_help()
    assert built.format_help() == whole.format_help()  # every verb listed with its help, as --help lists them


def test_the_other_verbs_are_listed_without_their_options() -> None:
    built = build_parser("render")
    assert [a.dest for a in _verb_parser(built, "submit")._actions] == ["help"]
    assert "--dry-run" in _verb_parser(build_parser(), "submit")._option_string_actions


@pytest.mark.parametrize("columns", ["", "57", "132", "not-a-number", "0"])
def test_help_is_as_wide_as_argparse_makes_it(columns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parser finds the terminal's width itself (not through `shutil`), and gets argparse's answer: $COLUMNS
    where it is a positive number, else the terminal's (here: none, so 80)."""
    monkeypatch.setenv("COLUMNS", columns)
    whole = build_parser()
    ours = [whole.format_help(), *(_verb_parser(whole, verb).format_help() for verb in sorted(COMMANDS))]
    monkeypatch.setattr(Parser, "_get_formatter", argparse.ArgumentParser._get_formatter)
    theirs = [whole.format_help(), *(_verb_parser(whole, verb).format_help() for verb in sorted(COMMANDS))]
    assert ours == theirs
