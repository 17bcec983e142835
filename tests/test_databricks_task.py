"""The Databricks entry point, run for real under pyspark's TorchDistributor on a local SparkSession.

CPU torch with gloo stands in for GPUs and NCCL. The Spark cases share one SparkSession (the JVM takes 5-11 s
to start) and are the slow part of the suite: a distributed run of the example, a distributed run where one
rank fails, and a local-mode run where one rank fails (the case TorchDistributor hides completely).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crosstrain import packaging
from crosstrain.databricks_task import DistributorCall, TrainingFailed, enter, failures, main, run, unpack

SRC = Path(__file__).resolve().parents[1] / "src"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "databricks" / "train.py"


def test_parameters_round_trip() -> None:
    call = DistributorCall(2, False, True, "file", "/Workspace/x/train.py", ("--lr", "0.1", "--", "-x"))
    assert DistributorCall.parse(call.parameters()) == call
    module = DistributorCall(4, True, False, "module", "pkg.train")
    assert DistributorCall.parse(module.parameters()) == module


def test_the_code_bundle_is_a_parameter_made_absolute() -> None:
    call = DistributorCall(2, False, True, "file", "train.py", ("--x",), "/Workspace/a/crosstrain_code-1.0.tar.gz")
    assert call.parameters()[0] == "--code=/Workspace/a/crosstrain_code-1.0.tar.gz"
    assert DistributorCall.parse(call.parameters()) == call
    relative = DistributorCall.parse(["--code=../x.tar.gz", *call.parameters()[1:]])
    assert relative.code == os.path.abspath("../x.tar.gz")  # the ranks run from elsewhere


def test_unpack_makes_one_folder_per_archive_and_enter_runs_from_the_user_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "train.py").write_text("import pkg.util\n")
    (source / "pkg" / "__init__.py").write_text("")
    (source / "pkg" / "util.py").write_text("VALUE = 7\n")
    archive = tmp_path / packaging.ARCHIVE_NAME
    archive.write_bytes(packaging.bundle(source).archive())
    monkeypatch.setenv("CROSSTRAIN_UNPACK_DIR", str(tmp_path / "unpacked"))
    root = unpack(str(archive))
    assert unpack(str(archive)) == root
    assert len(list((tmp_path / "unpacked" / "crosstrain-code").iterdir())) == 1, "no scratch folder left"
    assert (root / "crosstrain_code" / "src" / "pkg" / "util.py").read_text() == "VALUE = 7\n"
    assert unpack(str(root)) == root  # a folder that holds the bundle is used as it is
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    # enter() changes this process's environment: recorded first, so teardown puts back what was there (a
    # PYTHONPATH left pointing at the unpacked runtime would shadow crosstrain in every later subprocess).
    monkeypatch.setenv("PYTHONPATH", "")
    monkeypatch.setenv("CROSSTRAIN_CODE_DIR", "")
    assert enter(root) == root / "crosstrain_code" / "src"
    assert Path.cwd() == root / "crosstrain_code" / "src"
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [str(root / "crosstrain_code"), str(Path.cwd())]


def test_parse_refuses_nonsense() -> None:
    with pytest.raises(SystemExit):
        DistributorCall.parse(["--num-processes=0", "--local-mode=true", "--use-gpu=false", "--file=t.py"])
    with pytest.raises(SystemExit):
        DistributorCall.parse(["--num-processes=2", "--local-mode=maybe", "--use-gpu=false", "--file=t.py"])


def test_failures_needs_the_token_and_every_marker(tmp_path: Path) -> None:
    call = DistributorCall(2, True, False, "file", "t.py")
    ok = {"ok": True, "token": "t"}
    (tmp_path / "rank-0").write_text("t")
    assert failures(call, None, "t", None)  # what TorchDistributor returns for a failed file run
    assert failures(call, {"ok": True, "token": "other"}, "t", None)
    assert failures(call, ok, "t", str(tmp_path)) == ["rank(s) 1 of 2 did not finish"]
    (tmp_path / "rank-1").write_text("t")
    assert failures(call, ok, "t", str(tmp_path)) == []


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        # CI machines have Java 17: there a missing Java is a broken setup, not a reason to skip.
        (pytest.fail if os.environ.get("CI") else pytest.skip)("no Java for the local SparkSession")
    # The torchrun processes import crosstrain.databricks_task from this checkout (the venv points elsewhere).
    saved = {name: os.environ.get(name) for name in ("PYTHONPATH", "PYSPARK_PYTHON")}
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), saved["PYTHONPATH"]]))
    os.environ["PYSPARK_PYTHON"] = sys.executable  # Spark's Python workers, else whatever `python3` is on PATH
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    yield session
    session.stop()
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name)
        else:
            os.environ[name] = value


def test_distributed_run_of_the_example_trains_and_succeeds(spark: Any, tmp_path: Path) -> None:
    call = DistributorCall(2, False, False, "file", str(EXAMPLE), ("--epochs", "3", "--output-dir", str(tmp_path)))
    assert main(call.parameters()) == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["world_size"] == 2
    assert metrics["last_loss"] < metrics["first_loss"] / 10


# Rank 0 finishes first and hands back its result; rank 1 fails afterwards. TorchDistributor alone returns
# rank 0's value in local mode and None for a file in either mode, with no error.
FAILS_ON_RANK_1 = """
import os, sys, time
if os.environ["RANK"] == "1":
    time.sleep(2)
    sys.exit(3)
"""


@pytest.mark.parametrize("local_mode", [False, True], ids=["distributed", "local"])
def test_a_rank_that_fails_fails_the_task(
    spark: Any, tmp_path: Path, local_mode: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "fails_on_rank_1.py"
    script.write_text(textwrap.dedent(FAILS_ON_RANK_1))
    call = DistributorCall(2, local_mode, False, "file", str(script))
    # The wheel task's entry point raises (Databricks ignores a returned code); `main` returns 1.
    with pytest.raises(TrainingFailed):
        run(call.parameters())
    reason = capfd.readouterr().err
    if local_mode:  # run() handed back rank 0's success value; only the missing marker tells
        assert "rank(s) 1 of 2 did not finish" in reason
    else:  # the failed task aborts the barrier stage
        assert "crosstrain: training failed: Py4JJavaError" in reason


def test_a_shell_line_runs_on_every_rank_with_its_rank(spark: Any, tmp_path: Path) -> None:
    """`shell: true` on Databricks: each TorchDistributor rank runs the line with bash, with its own RANK."""
    line = f'test "$WORLD_SIZE" = 2 && echo "rank $RANK" > {tmp_path}/rank-"$RANK".txt'
    assert main(DistributorCall(2, False, False, "shell", line).parameters()) == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {f"rank-{r}.txt": f"rank {r}\n" for r in (0, 1)}


def test_deepspeed_parameters_round_trip() -> None:
    call = DistributorCall(16, False, True, "file", "train.py", ("--deepspeed",), "", True, 2, "ds.json")
    assert DistributorCall.parse(call.parameters()) == call
    assert call.distributor().startswith("DeepspeedTorchDistributor(numGpus=8, nnodes=2, localMode=False")
    uneven = [p.replace("--deepspeed-nodes=2", "--deepspeed-nodes=3") for p in call.parameters()]
    assert "--deepspeed-nodes=3" in uneven
    with pytest.raises(SystemExit):  # 16 processes cannot be spread over 3 nodes
        DistributorCall.parse(uneven)


def test_a_local_runs_ranks_tag_every_line_they_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the local emulation one driver relays every rank: each line says whose it is, as torchrun's do."""
    from crosstrain.databricks_task import RANK_TAGS, train_on_rank

    script = tmp_path / "train.py"
    script.write_text("import sys\nprint('loss', 1.5)\nprint('no newline', end='')\nprint('oops', file=sys.stderr)\n")
    monkeypatch.setenv(RANK_TAGS, "1")
    monkeypatch.setenv("RANK", "3")
    assert train_on_rank("file", str(script), [], "token", None)["ok"]
    out, err = capsys.readouterr()
    assert out == "[rank3] loss 1.5\n[rank3] no newline"
    assert err == "[rank3] oops\n"
    assert train_on_rank("shell", "echo from bash; echo again", [], "token", None)["ok"]
    assert capsys.readouterr().out == "[rank3] from bash\n[rank3] again\n"
