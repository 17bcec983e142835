"""Runs a function shipped from a notebook on one rank: `python -m crosstrain.function` (every rank runs it).

`crosstrain.run(fn, job)` and `crosstrain.submit(fn, job, target)` pickle `(fn, args, kwargs)` with cloudpickle
into the job's code bundle (`function.pkl`, beside `src/`), with cloudpickle itself, so a stock image runs it.
Each rank loads and calls it, as TorchDistributor's function mode does; the function joins the process group
itself (`crosstrain.runtime.init()`). Rank 0 writes its return value to `result.pkl`; a rank whose call raises
writes `error-rank<N>.txt` (its traceback) and exits 1. Both go to the result folder: `CROSSTRAIN_RESULT_DIR`,
else the job's model folder on Vertex (`AIP_MODEL_DIR` through Cloud Storage FUSE), else `outputs/`, which Azure
ML uploads with the run.

Standard library, cloudpickle and crosstrain's runtime only.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

RESULT = "result.pkl"
PAYLOAD = "function.pkl"


def error_file(rank: int) -> str:
    return f"error-rank{rank}.txt"


def result_dir(environ: dict[str, str] | os._Environ[str]) -> Path:
    if environ.get("CROSSTRAIN_RESULT_DIR"):
        return Path(environ["CROSSTRAIN_RESULT_DIR"])
    model = environ.get("AIP_MODEL_DIR", "")
    if model.startswith("gs://"):
        return Path("/gcs") / model[len("gs://") :]
    return Path("outputs")


def payload_path() -> Path:
    """`function.pkl` beside the code folder: the bootstrap names that folder (`CROSSTRAIN_CODE_DIR`); a process
    started without it (a Spark task) runs in the code folder itself."""
    folders = [Path(os.environ["CROSSTRAIN_CODE_DIR"])] if os.environ.get("CROSSTRAIN_CODE_DIR") else []
    for folder in [*folders, Path.cwd()]:
        if (folder.parent / PAYLOAD).is_file():
            return folder.parent / PAYLOAD
    return (folders or [Path.cwd()])[0].parent / PAYLOAD


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_bytes(data)
    partial.replace(path)


def main() -> int:
    import cloudpickle

    from crosstrain.runtime.env import detect

    rank = detect().one_process_per_node().rank or 0
    out = result_dir(os.environ)
    try:
        fn, args, kwargs = cloudpickle.loads(payload_path().read_bytes())
        result = fn(*args, **kwargs)
    except BaseException:
        text = traceback.format_exc()
        _write(out / error_file(rank), text.encode())
        print(text, file=sys.stderr, flush=True)
        return 1
    if rank == 0:
        _write(out / RESULT, cloudpickle.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
