"""Shell completion, run in the shell it is for: the words bash offers after what a user typed. (zsh and fish are
not on every machine: their scripts are checked for what they declare.)"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from crosstrain import cli
from crosstrain.registry import entries


def script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(["completion", shell]) == 0
    return capsys.readouterr().out


def offered(bash_script: str, line: list[str], cwd: str = ".") -> list[str]:
    """What bash's completion offers for `line`, the last word being the one completed."""
    words = " ".join(f"'{w}'" for w in line)
    run = f'COMP_WORDS=({words}); COMP_CWORD={len(line) - 1}; _crosstrain; printf "%s\\n" "${{COMPREPLY[@]}}"'
    program = f"{bash_script}\n{run}"
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True, cwd=cwd)
    return [w for w in done.stdout.splitlines() if w]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
def test_bash_completes_verbs_options_and_the_values_an_option_takes(
    capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    bash = script("bash", capsys)
    assert offered(bash, ["crosstrain", "sub"]) == ["submit"]
    assert offered(bash, ["crosstrain", "render", "job.yaml", "-t", ""]) == sorted(entries())
    assert offered(bash, ["crosstrain", "run", "job.yaml", "--target", "v"]) == ["vertex"]
    assert offered(bash, ["crosstrain", "run", "job.yaml", "--emulate", "azureml"]) == ["azureml", "azureml-mpi"]
    assert "--dry-run" in offered(bash, ["crosstrain", "submit", "job.yaml", "--d"])
    assert offered(bash, ["crosstrain", "completion", "f"]) == ["fish"]  # argparse's own choices
    assert offered(bash, ["crosstrain", "config", "u"]) == ["unset"]
    assert "gcloud" in offered(bash, ["crosstrain", "render", "job.yaml", "--format", ""])  # Vertex's own form
    assert "az-yaml" in offered(bash, ["crosstrain", "render", "job.yaml", "--format", "a"])


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
def test_bash_completes_file_names_where_a_job_goes(capsys: pytest.CaptureFixture[str], tmp_path: object) -> None:
    import pathlib

    folder = pathlib.Path(str(tmp_path))
    (folder / "job.yaml").write_text("name: j\n")
    bash = script("bash", capsys)
    assert offered(bash, ["crosstrain", "render", "jo"], cwd=str(folder)) == ["job.yaml"]
    assert offered(bash, ["crosstrain", "render", "job.yaml", "--set", "jo"], cwd=str(folder)) == ["job.yaml"]


def test_fish_and_zsh_declare_the_same_values(capsys: pytest.CaptureFixture[str]) -> None:
    fish = script("fish", capsys)
    targets = " ".join(sorted(entries()))
    assert f"complete -c crosstrain -n '__fish_seen_subcommand_from render' -l target -x -a '{targets}'" in fish
    assert "complete -c crosstrain -n '__fish_seen_subcommand_from render' -l json\n" in fish  # a flag: no value
    assert "__fish_seen_subcommand_from config; and not __fish_seen_subcommand_from get set unset list path" in fish
    zsh = script("zsh", capsys)
    assert f"'--target:value:({targets})'" in zsh
    assert "'--set:value:'" in zsh
