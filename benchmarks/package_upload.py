"""Package and upload a code folder: crosstrain against each platform's own SDK, the same folder, in one run.

A folder of `--files` files and `--mb` MB in all (a tree of source-like text and binary blobs, fixed seed) is
shipped by:

* **Cloud Storage**: the Vertex AI SDK's source packager (`_TrainingScriptPythonPackager.package_and_copy_to_gcs`:
  copies the folder, `setup.py sdist`, uploads with google-cloud-storage) against crosstrain's Vertex submit
  (bundle, deterministic archive, upload with google-cloud-storage, create), both to gcp-storage-emulator;
* **Azure Blob**: azure-ai-ml's code upload (`MLClient.jobs.create_or_update(command(code=...))`: hash, list by
  hash, startPendingUpload, blob PUTs, code version, job) against crosstrain's Azure ML submit (the same calls),
  both to Azurite behind a loopback Azure ML workspace.

For each it prints the SDK's time, crosstrain's, their ratio (goal: at most 0.5) and the time of an unchanged
re-submit beyond its render (goal: under 0.1 s): the folder is found where it was uploaded and nothing is sent
again.

    python benchmarks/package_upload.py [--files 10000] [--mb 200] [--json] [gcs] [azure]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]  # this checkout, and the platform fakes beside its tests

from crosstrain import packaging  # noqa: E402
from crosstrain.loader import job_from_dict  # noqa: E402
from crosstrain.retry import RetryPolicy  # noqa: E402
from crosstrain.spec import TrainingJob  # noqa: E402


def make_folder(root: Path, files: int, megabytes: float, seed: int = 1) -> Path:
    """`files` files, `megabytes` in all: nine in ten small source-like text files, the rest binary blobs, every
    one a module of a package (`__init__.py` in every folder, the blobs named `.py` too): Vertex's source packager
    ships only what setuptools' `find_packages()` finds and leaves the rest out without a word, so this is a
    folder both sides ship whole."""
    rng = random.Random(seed)
    total = int(megabytes * 1024 * 1024)
    blobs = max(1, files // 10)
    folders = [f"pkg{p}" for p in range(50)] + [f"pkg{p}/mod{m}" for p in range(50) for m in range(10)]
    folders += ["assets"] + [f"assets/a{a}" for a in range(20)] + ["."]  # the packager's root module too
    for folder in folders:
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "__init__.py").write_bytes(b"")
    texts = files - blobs - len(folders) - 1  # and train.py
    text_bytes = min(total // 10, texts * 2048)
    line = b"def f(x):\n    return x * 2  # a line of source\n"
    for i in range(texts):
        path = root / f"pkg{i % 50}" / f"mod{(i // 50) % 10}" / f"m{i}.py"
        path.write_bytes(line * max(1, text_bytes // texts // len(line)))
    blob_size = (total - text_bytes) // blobs
    for i in range(blobs):
        (root / "assets" / f"a{i % 20}" / f"blob{i}.py").write_bytes(rng.randbytes(blob_size))
    (root / "train.py").write_text("print('train')\n")
    return root


def timed(work: Callable[[], Any]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def code_job(folder: Path, changes: dict[str, Any]) -> TrainingJob:
    data = {
        "name": "bench",
        "code": folder.name,
        "command": "python train.py",
        "primary": {"machine": "T4:1"},
        **changes,
    }
    return job_from_dict(data).located(folder.parent)


# -- Azure Blob ----------------------------------------------------------------------------------------------
def azure(folder: Path) -> dict[str, float]:
    from azure.ai.ml import MLClient, command
    from tests.backends.azureml_cloud import (
        SUBSCRIPTION,
        WORKSPACE,
        AzureMLService,
        AzureMLTransport,
        FakeCredential,
        azurite,
        azurite_command,
    )

    from crosstrain.backends.azureml.backend import AzureMLBackend

    program = azurite_command()
    if program is None:
        raise SystemExit("azure: no azurite-blob (npm install --prefix .ci azurite, or set CROSSTRAIN_AZURITE)")
    settings = {**WORKSPACE, "compute": "cpu-cluster"}
    job = code_job(folder, {"environment": "pytorch"})
    with azurite(program) as url:  # each in an Azurite of its own: a fuller one answers slower
        sdk_service = AzureMLService(blob_endpoint=url, container="sdk")
        ml = MLClient(FakeCredential(), SUBSCRIPTION, "my-rg", "my-ws", transport=AzureMLTransport(sdk_service))
        sdk_job = command(
            name="bench-sdk",
            code=str(folder),
            command="python train.py",
            environment="azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest",
            compute="cpu-cluster",
        )
        here = os.getcwd()
        os.chdir(folder.parent)  # outside a git repository, as for crosstrain
        try:
            sdk = timed(lambda: ml.jobs.create_or_update(sdk_job))
        finally:
            os.chdir(here)
    with azurite(program) as url:
        service = AzureMLService(blob_endpoint=url, container="crosstrain")

        def backend() -> AzureMLBackend:
            return AzureMLBackend(
                transport=AzureMLTransport(service),
                credential=FakeCredential(),
                retry=RetryPolicy(sleep=lambda s: None),
                environ={},
            )

        packaging._CACHE.clear()  # a fresh process lists, reads and hashes every file
        packaging._LISTED.clear()
        ours = timed(lambda: backend().submit(job, settings))
        again_job = job.model_copy(update={"run_id": "again"})
        render = timed(lambda: backend().render(again_job, settings))
        resubmit = timed(lambda: backend().submit(again_job, settings))
    return {"sdk_s": sdk, "crosstrain_s": ours, "resubmit_s": resubmit, "render_s": render}


# -- Cloud Storage -------------------------------------------------------------------------------------------
@contextlib.contextmanager
def gcs_emulator() -> Iterator[str]:
    import socket

    from gcp_storage_emulator.server import create_server

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="staging")
    server.start()
    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        if previous is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = previous
        server.stop()


def gcs(folder: Path) -> dict[str, float]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage
    from google.cloud.aiplatform.utils import source_utils
    from tests.backends.vertex_server import VertexPlatform

    from crosstrain.backends.vertex.backend import VertexBackend

    with gcs_emulator() as url:
        anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]
        packager = source_utils._TrainingScriptPythonPackager(str(folder))  # a folder is packaged whole
        sdk = timed(lambda: packager.package_and_copy_to_gcs("gs://staging/sdk", "my-project", credentials=anonymous))

        def client(project: str) -> Any:
            return storage.Client(project=project, credentials=anonymous, client_options={"api_endpoint": url})

        job = code_job(folder, {"environment": "pytorch"})
        with VertexPlatform() as vertex:
            settings = {**vertex.settings, "staging_bucket": "gs://staging/crosstrain"}

            # The fake Vertex service's policy, with crosstrain's own call timeout: the fake's half a second
            # (for its fault tests) times out the emulator's answer to a 200 MB upload, which is then retried.
            retry = dataclasses.replace(vertex.retry_policy(), call_timeout=RetryPolicy().call_timeout)

            def backend() -> VertexBackend:
                return VertexBackend(client_factory=vertex.client, storage_client=client, retry=retry, environ={})

            packaging._CACHE.clear()  # a fresh process lists, reads and hashes every file
            packaging._LISTED.clear()
            ours = timed(lambda: backend().submit(job, settings))
            again_job = job.model_copy(update={"run_id": "again"})
            render = timed(lambda: backend().render(again_job, settings))
            resubmit = timed(lambda: backend().submit(again_job, settings))
        bucket = storage.Client(project="p", credentials=anonymous, client_options={"api_endpoint": url}).bucket(
            "staging"
        )
        sizes = {prefix: sum(b.size for b in bucket.list_blobs(prefix=prefix)) for prefix in ("sdk/", "crosstrain/")}
    return {
        "sdk_s": sdk,
        "crosstrain_s": ours,
        "resubmit_s": resubmit,
        "render_s": render,
        # The SDK's sdist holds only what setuptools' find_packages() finds (here, everything: see make_folder).
        "sdk_uploaded_mb": sizes["sdk/"] / 1e6,
        "crosstrain_uploaded_mb": sizes["crosstrain/"] / 1e6,
    }


BENCHES: dict[str, Callable[[Path], dict[str, float]]] = {"gcs": gcs, "azure": azure}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--mb", type=float, default=200)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("which", nargs="*", help=f"which of {', '.join(BENCHES)} (default: all)")
    args = parser.parse_args()
    unknown = set(args.which) - set(BENCHES)
    if unknown:
        parser.error(f"unknown: {', '.join(sorted(unknown))}")
    args.which = args.which or list(BENCHES)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="package-upload-") as scratch:
        folder = make_folder(Path(scratch) / "project", args.files, args.mb)
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        print(f"folder: {args.files:,} files, {size / 1e6:.0f} MB", file=sys.stderr)
        for name in args.which:
            print(f"{name}...", file=sys.stderr, flush=True)
            result = BENCHES[name](folder)
            result["ratio"] = result["crosstrain_s"] / result["sdk_s"]
            result["resubmit_beyond_render_s"] = result["resubmit_s"] - result["render_s"]
            results[name] = result
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        "store | SDK s | crosstrain s | ratio (goal <= 0.5) | unchanged re-submit beyond render s (goal < 0.1) "
        "| uploaded MB (SDK / crosstrain)"
    )
    print("--- | --- | --- | --- | --- | ---")
    for name, r in results.items():
        uploaded = f"{r['sdk_uploaded_mb']:.1f} / {r['crosstrain_uploaded_mb']:.1f}" if "sdk_uploaded_mb" in r else "-"
        print(
            f"{name} | {r['sdk_s']:.2f} | {r['crosstrain_s']:.2f} | {r['ratio']:.2f} | "
            f"{r['resubmit_beyond_render_s']:.3f} (render {r['render_s']:.3f}) | {uploaded}"
        )


if __name__ == "__main__":
    main()
