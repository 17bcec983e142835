"""Shell completion scripts (`crosstrain completion bash|zsh|fish`), made from the CLI's own parser, so that a new
verb, action or option completes without a list to keep. An option's values complete where they are known (its
argparse choices, or what the caller names: target names after `-t`, emulations after `--emulate`); other
options take what is typed, and the rest of the line completes file names."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Mapping
from dataclasses import field

from crosstrain.frozen import frozen


@frozen
class Command:
    """A verb (or a verb's action): its options, which of them take a value, and the values known for those."""

    options: list[str]
    takes_value: set[str] = field(default_factory=set)
    values: dict[str, list[str]] = field(default_factory=dict)
    #: The words a positional argument takes where argparse lists them (`completion SHELL`); else file names.
    positional: list[str] = field(default_factory=list)


def script(parser: argparse.ArgumentParser, shell: str, known: Mapping[str, list[str]] | None = None) -> str:
    """The completion script for `shell`: the parser's verbs, then each verb's options (and their values), then
    file names; for a verb with actions (`config`), its actions first. `known` gives values by option name
    (`--target`: the target names) where argparse has no choices."""
    verbs = _subcommands(parser)
    commands = {name: _command(sub, known or {}) for name, sub in verbs.items()}
    actions = {name: {a: _command(sub, known or {}) for a, sub in _subcommands(p).items()} for name, p in verbs.items()}
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](commands, actions)


def _bash(commands: dict[str, Command], actions: dict[str, dict[str, Command]]) -> str:
    def body(command: Command, indent: str) -> str:
        lines = [f'{indent}opts="{" ".join(command.options)}"']
        if command.positional:
            lines.append(f'{indent}words="{" ".join(command.positional)}"')
        if command.takes_value:
            cases = [
                f'{indent}    {"|".join(sorted(opts))}) COMPREPLY=($(compgen -W "{words}" -- "$cur")); return ;;'
                for words, opts in _by_values(command).items()
            ]
            if cases:
                lines.append(f'{indent}case "$prev" in\n' + "\n".join(cases) + f"\n{indent}esac")
        return "\n".join(lines)

    def case(verb: str) -> str:
        if not actions[verb]:
            return f"        {verb})\n{body(commands[verb], ' ' * 12)} ;;"
        inner = "\n".join(f"                {a})\n{body(c, ' ' * 20)} ;;" for a, c in actions[verb].items())
        return (
            f"        {verb})\n"
            '            if [ "$COMP_CWORD" -eq 2 ]; then\n'
            f'                COMPREPLY=($(compgen -W "{" ".join(actions[verb])}" -- "$cur")); return\n'
            "            fi\n"
            f'            case "${{COMP_WORDS[2]}}" in\n{inner}\n            esac ;;'
        )

    return (
        "_crosstrain() {\n"
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" verb="${COMP_WORDS[1]}" '
        'opts="" words=""\n'
        '    if [ "$COMP_CWORD" -eq 1 ]; then\n'
        f'        COMPREPLY=($(compgen -W "{" ".join(commands)}" -- "$cur")); return\n'
        "    fi\n"
        '    case "$verb" in\n' + "\n".join(case(verb) for verb in commands) + "\n    esac\n"
        '    if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "$opts" -- "$cur"));\n'
        '    elif [ -n "$words" ]; then COMPREPLY=($(compgen -W "$words" -- "$cur"));\n'
        '    else COMPREPLY=($(compgen -f -- "$cur")); fi\n'
        "}\n"
        "complete -o filenames -F _crosstrain crosstrain"
    )


def _zsh(commands: dict[str, Command], actions: dict[str, dict[str, Command]]) -> str:
    def spec(command: Command, option: str) -> str:
        if option not in command.takes_value:
            return f"'{option}'"
        values = command.values.get(option)
        return f"'{option}:value:({' '.join(values)})'" if values else f"'{option}:value:'"

    def arguments(command: Command) -> str:
        rest = f"'1:value:({' '.join(command.positional)})'" if command.positional else "'*:file:_files'"
        return f"_arguments {rest} " + " ".join(spec(command, o) for o in command.options)

    def case(verb: str) -> str:
        if not actions[verb]:
            return f"    {verb}) {arguments(commands[verb])} ;;"
        inner = "\n".join(f"        {a}) {arguments(c)} ;;" for a, c in actions[verb].items())
        return (
            f"    {verb})\n"
            f"      if (( CURRENT == 3 )); then compadd {' '.join(actions[verb])}; return; fi\n"
            f"      case $words[3] in\n{inner}\n      esac ;;"
        )

    return (
        "#compdef crosstrain\n"
        "_crosstrain() {\n"
        "  if (( CURRENT == 2 )); then\n"
        f"    compadd {' '.join(commands)}; return\n"
        "  fi\n"
        "  case $words[2] in\n" + "\n".join(case(verb) for verb in commands) + "\n  esac\n"
        "}\n"
        'if [ "$funcstack[1]" = "_crosstrain" ]; then _crosstrain "$@"; else compdef _crosstrain crosstrain; fi'
    )


def _fish(commands: dict[str, Command], actions: dict[str, dict[str, Command]]) -> str:
    verbs = " ".join(commands)
    lines = [
        "complete -c crosstrain -e",
        f"complete -c crosstrain -f -n 'not __fish_seen_subcommand_from {verbs}' -a '{verbs}'",
    ]

    def options(command: Command, condition: str) -> None:
        for option in command.options:
            flag = f"-l {option[2:]}" if option.startswith("--") else f"-s {option[1:]}"
            line = f"complete -c crosstrain -n {shlex.quote(condition)} {flag}"
            if option in command.takes_value:
                values = command.values.get(option)
                line += f" -x -a {shlex.quote(' '.join(values))}" if values else " -r"
            lines.append(line)
        if command.positional:
            lines.append(
                f"complete -c crosstrain -f -n {shlex.quote(condition)} -a {shlex.quote(' '.join(command.positional))}"
            )

    for verb, command in commands.items():
        seen = f"__fish_seen_subcommand_from {verb}"
        if actions[verb]:
            names = " ".join(actions[verb])
            lines.append(
                f"complete -c crosstrain -f -n {shlex.quote(f'{seen}; and not __fish_seen_subcommand_from {names}')} "
                f"-a {shlex.quote(names)}"
            )
            for action, sub in actions[verb].items():
                options(sub, f"{seen}; and __fish_seen_subcommand_from {action}")
        else:
            options(command, seen)
    return "\n".join(lines)


def _by_values(command: Command) -> dict[str, list[str]]:
    """The options that take a value grouped by the words they complete ("" for what is typed: no words)."""
    grouped: dict[str, list[str]] = {}
    for option in sorted(command.takes_value):
        values = command.values.get(option)
        if values:
            grouped.setdefault(" ".join(values), []).append(option)
    return grouped


def _command(parser: argparse.ArgumentParser, known: Mapping[str, list[str]]) -> Command:
    options, takes_value, values, positional = [], set(), {}, []
    for action in parser._actions:
        if not action.option_strings and action.choices and not isinstance(action, argparse._SubParsersAction):
            positional += [str(c) for c in action.choices]
        for option in action.option_strings:
            options.append(option)
            if action.nargs != 0:  # store_true, store_const, help and version take nothing
                takes_value.add(option)
                choices = [str(c) for c in action.choices] if action.choices else None
                named = next((known[o] for o in action.option_strings if o in known), None)
                if choices or named:
                    values[option] = choices or list(named or [])
    return Command(sorted(options), takes_value, values, positional)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's verbs (or a verb's actions), by name; none where it has none."""
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found[0].choices) if found else {}
