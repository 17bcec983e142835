"""Shell completion scripts (`crosstrain completion bash|zsh`), made from the CLI's own parser, so that a new
verb, action or option completes without a list to keep."""

from __future__ import annotations

import argparse


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for `shell` (bash or zsh): the parser's verbs, then each verb's options (and file
    names for the rest); for a verb with actions (`config`), its actions, then each action's options."""
    verbs = _subcommands(parser)
    options = {name: _options(sub) for name, sub in verbs.items()}
    actions = {name: {a: _options(sub) for a, sub in _subcommands(p).items()} for name, p in verbs.items()}
    return (_bash if shell == "bash" else _zsh)(options, actions)


def _bash(options: dict[str, list[str]], actions: dict[str, dict[str, list[str]]]) -> str:
    def case(verb: str) -> str:
        if not actions[verb]:
            return f'        {verb}) opts="{" ".join(options[verb])}" ;;'
        inner = "\n".join(f'                {a}) opts="{" ".join(o)}" ;;' for a, o in actions[verb].items())
        return (
            f"        {verb})\n"
            '            if [ "$COMP_CWORD" -eq 2 ]; then\n'
            f'                COMPREPLY=($(compgen -W "{" ".join(actions[verb])}" -- "$cur")); return\n'
            "            fi\n"
            f'            case "${{COMP_WORDS[2]}}" in\n{inner}\n            esac ;;'
        )

    return (
        "_crosstrain() {\n"
        '    local cur="${COMP_WORDS[COMP_CWORD]}" verb="${COMP_WORDS[1]}" opts=""\n'
        '    if [ "$COMP_CWORD" -eq 1 ]; then\n'
        f'        COMPREPLY=($(compgen -W "{" ".join(options)}" -- "$cur")); return\n'
        "    fi\n"
        '    case "$verb" in\n' + "\n".join(case(verb) for verb in options) + "\n    esac\n"
        '    if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "$opts" -- "$cur"));\n'
        '    else COMPREPLY=($(compgen -f -- "$cur")); fi\n'
        "}\n"
        "complete -o filenames -F _crosstrain crosstrain"
    )


def _zsh(options: dict[str, list[str]], actions: dict[str, dict[str, list[str]]]) -> str:
    def arguments(opts: list[str]) -> str:
        return f"_arguments '*:file:_files' {' '.join(repr(o) for o in opts)}"

    def case(verb: str) -> str:
        if not actions[verb]:
            return f"    {verb}) {arguments(options[verb])} ;;"
        inner = "\n".join(f"        {a}) {arguments(o)} ;;" for a, o in actions[verb].items())
        return (
            f"    {verb})\n"
            f"      if (( CURRENT == 3 )); then compadd {' '.join(actions[verb])}; return; fi\n"
            f"      case $words[3] in\n{inner}\n      esac ;;"
        )

    return (
        "#compdef crosstrain\n"
        "_crosstrain() {\n"
        "  if (( CURRENT == 2 )); then\n"
        f"    compadd {' '.join(options)}; return\n"
        "  fi\n"
        "  case $words[2] in\n" + "\n".join(case(verb) for verb in options) + "\n  esac\n"
        "}\n"
        'if [ "$funcstack[1]" = "_crosstrain" ]; then _crosstrain "$@"; else compdef _crosstrain crosstrain; fi'
    )


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's verbs (or a verb's actions), by name; none where it has none."""
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found[0].choices) if found else {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(o for action in parser._actions for o in action.option_strings)
