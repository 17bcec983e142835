"""What the Google backends (Vertex AI, AI Platform Training) share: labels, the identity label, and how a
training command runs where the platform starts one process per node."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Annotated
from urllib.parse import parse_qs, urlencode

from pydantic import AfterValidator

from crosstrain import secrets
from crosstrain.backends.base import archive_bootstrap, launcher_command
from crosstrain.backends.binding import shown
from crosstrain.errors import JobFailed, Problem, SpecError, SubmitError, Unsupported, closest
from crosstrain.locations import bucket_problem
from crosstrain.records import HttpCall, JobHandle, Request

if TYPE_CHECKING:
    from collections.abc import Callable

    from google.cloud.storage import Client

    from crosstrain.data import Placement
    from crosstrain.packaging import CodeRef
    from crosstrain.preflight import Check
    from crosstrain.retry import RetryPolicy
    from crosstrain.spec import PoolView, TrainingJob

# The label that carries crosstrain's render-time identity, so a job can be found again after a lost response,
# and the one that carries the request's fingerprint, so a job made from another request is never adopted.
IDENTITY_LABEL = "crosstrain-id"
FINGERPRINT_LABEL = "crosstrain-fp"
_LABEL = re.compile(r"^[a-z0-9_-]{0,63}$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")


def label_problems(job: TrainingJob) -> list[Problem]:
    """Google's label rules: keys start with a lowercase letter; keys and values are at most 63 characters of
    lowercase letters, digits, `_` and `-`. Refused rather than rewritten, so the labels you search by are yours."""
    problems = []
    for key, value in job.labels.items():
        if not _LABEL_KEY.match(key):
            problems.append(
                Problem(
                    f"labels.{key}",
                    "is not a valid Google label key",
                    "use a lowercase letter, then up to 62 lowercase letters, digits, '_' or '-'",
                )
            )
        if not _LABEL.match(value):
            problems.append(
                Problem(
                    f"labels.{key}",
                    f"value {value!r} is not a valid Google label value",
                    "use at most 63 lowercase letters, digits, '_' or '-'",
                )
            )
        if key in (IDENTITY_LABEL, FINGERPRINT_LABEL):
            problems.append(Problem(f"labels.{key}", "is reserved for crosstrain's job identity", "rename the label"))
    return problems


def labels(job: TrainingJob, identity: str, fingerprint: str) -> dict[str, str]:
    """The job's labels plus the identity and fingerprint labels, sorted for a deterministic body."""
    return dict(sorted({**job.labels, IDENTITY_LABEL: identity[:63], FINGERPRINT_LABEL: fingerprint}.items()))


def region_check(region: str, known: tuple[str, ...], target: str, platform: str) -> Problem | str | None:
    """`region` against the platform's list: None where listed; a problem naming the nearest where it misspells
    one (its words, less the number, are no listed region's: `us-centrall1`); else a note, since a region newer
    than the list is allowed and the platform has the last word (`europe-west13`)."""
    if region in known:
        return None
    words = region.rstrip("0123456789")
    nearest = closest(region, known, cutoff=0.8)
    if nearest and not any(name.rstrip("0123456789") == words for name in known):
        return Problem(
            f"targets.{target}.region",
            f"{region!r} is not a {platform} region; did you mean {nearest}?",
            f"set targets.{target}.region: {nearest} (or another of {platform}'s regions)",
        )
    return f"region {region} is not in crosstrain's list of {platform} regions: a newer one, or {platform} refuses it"


#: Secrets in Google Secret Manager are read at start by crosstrain's runtime, with the job's service account.
SECRET_STORES = frozenset({"gcp"})

# Vertex AI and AI Platform Training both start one process per node of the primary and worker pools.
TRAINING_ROLES = ("primary", "workers")


def runs_under_launcher(job: TrainingJob, gpu_count: int) -> bool:
    """Whether a training pool's command runs under crosstrain's per-node launcher: PyTorch jobs in per-node
    mode, or in auto mode where a node runs more than one process, or where crosstrain travels with the code
    and there is more than one node: the platform's `RANK` is a node's, which frameworks (Lightning, Accelerate)
    take for a process rank, and the launcher gives the command torchrun's variables instead and has the primary
    say whom it waits for (DeepSpeed's ranks too, each given its arguments). TensorFlow and MPI start their own."""
    if job.launch.framework not in ("pytorch", "deepspeed"):
        return False
    if job.launch.mode == "per-node":
        return True
    ships_crosstrain = job.code is not None or job.function_payload is not None
    return job.launch.mode == "auto" and (job.processes_per_node(gpu_count) > 1 or (ships_crosstrain and job.nodes > 1))


def node_command(job: TrainingJob, pool: PoolView, gpu_count: int) -> list[str] | None:
    """The pool's container command, wrapped in the launcher where `runs_under_launcher` says so, and in the
    secret resolver (outermost, so it runs once per node) where the pool has secrets."""
    command = pool.command
    if command and pool.role in TRAINING_ROLES and runs_under_launcher(job, gpu_count):
        command = launcher_command(command, nproc_per_node=job.processes_per_node(gpu_count))
    if command and pool.secrets:
        command = secrets.resolver_command(command)
    return command


def launch_problems(job: TrainingJob, pool: PoolView, gpu_count: int, platform: str) -> list[Problem]:
    """What a platform that starts one process per node cannot run: several processes it should start itself,
    or a launcher with no command to start."""
    if pool.role not in TRAINING_ROLES:
        return []
    problems = []
    processes = job.processes_per_node(gpu_count)
    if job.launch.mode == "per-process" and processes > 1:
        problems.append(
            Problem(
                "launch.mode",
                f"{platform} starts one process per node, not the {processes} per node of {pool.role}",
                "use launch.mode auto or per-node (crosstrain's launcher starts one process per GPU), "
                "or set launch.processes_per_node: 1 and start them yourself",
            )
        )
    if runs_under_launcher(job, gpu_count) and not pool.command:
        problems.append(
            Problem(
                "command",
                "crosstrain's per-node launcher needs the command to start on each GPU, and the job leaves it to "
                "the image's entrypoint: it needs a command",
                "set `command` (the image needs crosstrain installed), or launch.mode: per-process with "
                "processes_per_node: 1",
            )
        )
    return problems


# ---- shipping the code: the bundle's sdist in Cloud Storage ------------------------------------------------
#: Where a staging bucket's objects are uploaded (the JSON API's media endpoint).
STORAGE_UPLOAD = "https://storage.googleapis.com/upload/storage/v1/b/{bucket}/o"
_STAGING = re.compile(r"gs://(?P<bucket>[a-z0-9][a-z0-9._-]{1,220}[a-z0-9])(?:/(?P<prefix>[^\x00\r\n]*?))?/*")
_UPLOAD_URL = re.compile(
    r"https://storage\.googleapis\.com/upload/storage/v1/b/(?P<bucket>[a-z0-9][a-z0-9._-]*[a-z0-9])/o\?(?P<query>.*)"
)
#: The module a package job runs: the bundle's bootstrap (`crosstrain.bootstrap`).
PYTHON_MODULE = "crosstrain_code"


def staging_problem(value: str) -> str | None:
    """Why `value` is not a gs://bucket[/prefix] staging location (`what; fix`), or None."""
    why = bucket_problem(value) if value.startswith("gs://") else "it does not start with gs://"
    if why is None and not _STAGING.fullmatch(value):
        why = "its prefix holds a NUL or a line break"
    return f"{value!r} is not a Cloud Storage location: {why}; write gs://BUCKET or gs://BUCKET/PREFIX" if why else None


def _staging_location(value: str | None) -> str | None:
    problem = staging_problem(value) if value is not None else None
    if problem:
        raise ValueError(problem)
    return value


#: The `staging_bucket` setting of both Google targets: where a job's code package is uploaded.
StagingBucket = Annotated[str | None, AfterValidator(_staging_location)]


def staged_object(staging_bucket: str, short: str) -> tuple[str, str]:
    """(bucket, object name) of a bundle's sdist: content-addressed under the staging prefix, so an unchanged
    folder is found where it was uploaded before."""
    from crosstrain.packaging import ARCHIVE_NAME

    bucket, _, prefix = staging_bucket.removeprefix("gs://").partition("/")  # validated: gs://BUCKET[/PREFIX]
    prefix = prefix.strip("/")
    name = f"{prefix + '/' if prefix else ''}crosstrain/code/{short}/{ARCHIVE_NAME}"
    return bucket, name


def upload_call(bucket: str, name: str, code: CodeRef) -> HttpCall:
    """The rendered upload of the bundle's sdist: where it goes and what it holds (not its bytes)."""
    from crosstrain.packaging import ARCHIVE_NAME, counted

    url = f"{STORAGE_UPLOAD.format(bucket=bucket)}?{urlencode({'uploadType': 'multipart', 'name': name})}"
    body = {
        "name": name,
        "contentType": "application/gzip",
        "metadata": {"crosstrain-sha256": code.digest},
        "archive": {"format": f"sdist {ARCHIVE_NAME}", "sha256": code.digest, "files": code.files, "bytes": code.bytes},
    }
    return HttpCall(
        "POST",
        url,
        body,
        purpose=f"upload the job's code ({counted(code.files, 'file')}, {code.bytes} bytes, and crosstrain's runtime) "
        "as "
        f"{ARCHIVE_NAME}, unless gs://{bucket}/{name} already exists (its name is its digest): a re-submit "
        "uploads nothing; resumable above 8 MiB",
    )


def uploaded_object(call: HttpCall) -> tuple[str, str] | None:
    """(bucket, object name) of a rendered upload call, or None where the call is not one."""
    match = _UPLOAD_URL.fullmatch(call.url) if isinstance(call.url, str) else None
    if match is None:
        return None
    names = parse_qs(match["query"]).get("name") or []
    return (match["bucket"], names[0]) if len(names) == 1 else None


def upload_problems(calls: tuple[HttpCall, ...], code: CodeRef | None) -> list[Problem]:
    """A request's upload calls that are not the upload of its own bundle to storage.googleapis.com."""
    problems = []
    for i, call in enumerate(calls[:-1]):
        where = uploaded_object(call)
        if where is None:
            continue
        if code is None or f"/crosstrain/code/{code.digest[:32]}/" not in f"/{where[1]}":
            problems.append(
                Problem(
                    f"request.calls[{i}].url",
                    f"{shown(call.url)} does not upload this request's code to its content address",
                    "render the request again",
                )
            )
    return problems


def code_refusals(job: TrainingJob, staging_bucket: str | None, target: str, platform: str) -> list[Problem]:
    """What shipping `job.code` (or a function, which ships the same way) needs on a Google target: a staging
    bucket, and a command on every pool."""
    problems: list[Problem] = []
    if job.code is None and job.function_payload is None:
        if job.requirements is not None:
            problems.append(
                Problem(
                    "requirements",
                    f"{platform} installs requirements from the job's code package (its install_requires), and the "
                    "job ships no code",
                    "set `code` (the folder with your training code), or bake the requirements into your image",
                )
            )
        return problems
    if not staging_bucket:
        problems.append(
            Problem(
                "code" if job.code is not None else f"targets.{target}.staging_bucket",
                f"{platform} fetches the code package ({'the job' if job.code is not None else 'the function'}'s) "
                "from Cloud Storage, and no staging bucket is set",
                f"set targets.{target}.staging_bucket: gs://BUCKET[/PREFIX] (or --set staging_bucket=gs://...)",
            )
        )
    for pool in job.pools():
        if not pool.command:
            problems.append(
                Problem(
                    "command" if pool.role == "primary" else f"{pool.role}.command",
                    "the shipped code runs through crosstrain's bootstrap, which needs the command to run "
                    f"({pool.role} has none: the image's entrypoint cannot run the code)",
                    "set `command`, e.g. [python, train.py]",
                )
            )
    return problems


def fuse_command(bucket: str, name: str, command: list[str], *, install: bool) -> list[str]:
    """A container command that runs `command` from the bundle read through /gcs/<bucket>/<object>, on a
    container that is not a pre-built one: `archive_bootstrap` unpacks the sdist from the Cloud Storage FUSE mount
    into a fresh folder and starts the bootstrap there (standard library only, no pip)."""
    from crosstrain.backends.base import bundle_command

    bootstrap_args = bundle_command(command, install=install)[3:]
    return ["python3", "-c", archive_bootstrap(), f"/gcs/{bucket}/{name}", *bootstrap_args]


def fuse_bootstrap_args(argv: list[str]) -> list[str] | None:
    """The bootstrap's arguments in a `fuse_command`, or None where `argv` is not one (local emulation runs
    them from the unpacked bundle instead of the FUSE mount)."""
    if len(argv) >= 4 and argv[:3] == ["python3", "-c", archive_bootstrap()] and argv[3].startswith("/gcs/"):
        return argv[4:]
    return None


def storage_client(project: str, extra: str) -> Client:
    """google-cloud-storage's client for `project` (STORAGE_EMULATOR_HOST points it at an emulator)."""
    from crosstrain.adaptors import gcs

    return gcs.client(project, extra=extra)


def ship_code(request: Request, client: Callable[[], Client], retry: RetryPolicy) -> int:
    """Upload the request's code to every upload call's object that does not hold it yet (the folder packaged
    again, refused if it changed since the render); the number of objects uploaded. No client is made for a
    request that uploads nothing."""
    uploads = [where for call in request.calls[:-1] if (where := uploaded_object(call)) is not None]
    if not uploads:
        return 0
    if request.code is None:
        raise SubmitError("the request uploads code and names no folder to upload: render it again")
    from crosstrain import packaging
    from crosstrain.adaptors import gcs

    made = packaging.check_unchanged(request.code)  # UploadRefused (exit 2) if the folder changed
    storage = client()
    sent = 0
    for bucket, name in uploads:
        ship = functools.partial(gcs.ship, storage, bucket, name, made, timeout=retry.call_timeout)
        sent += retry.poll(ship)
    return sent


def read_result(handle: JobHandle, client: Callable[[], Client], retry: RetryPolicy) -> bytes:
    """A function job's result from Cloud Storage, where its rank 0 wrote it through the FUSE mount."""
    from crosstrain.adaptors import gcs
    from crosstrain.backends.base import MAX_RESULT_BYTES

    if not handle.result_at.startswith("gs://"):
        raise Unsupported(
            handle.target,
            [Problem("result", f"the result is at {handle.result_at}, not in Cloud Storage", "copy it from there")],
        )
    bucket, _, name = handle.result_at.removeprefix("gs://").partition("/")
    storage = client()
    try:
        data = retry.poll(
            functools.partial(gcs.read, storage, bucket, name, timeout=retry.call_timeout, limit=MAX_RESULT_BYTES)
        )
    except gcs.TooLarge as large:
        raise SpecError(
            [
                Problem(
                    "result",
                    f"{handle.result_at} holds {large.size:,} bytes, over {MAX_RESULT_BYTES:,}",
                    "load it there",
                )
            ]
        ) from None
    if data is None:
        raise JobFailed(f"job {handle.identity} succeeded and left no result at {handle.result_at}")
    return data


# ---- data inputs and outputs -------------------------------------------------------------------------------
#: The account settings a Google target's request is rendered with under `--emulate`, where the job file has none.
PLACEHOLDER_SETTINGS = {"project": "local-emulation", "region": "us-central1", "staging_bucket": "gs://local-emulation"}


def data_placement(platform: str, *, fuse: bool) -> Placement:
    """Where a Google target's nodes reach data. Vertex AI (`fuse`) mounts Cloud Storage at /gcs/BUCKET/PATH on
    every node; AI Platform Training has no such mount, so its command gets the gs:// URI; either passes any other
    cloud URI as is where the mode is `direct`."""
    from crosstrain.data import Placement, Reach

    if fuse:
        gs = Reach(
            frozenset({None, "mount", "direct"}),
            "its nodes read and write Cloud Storage in place through the FUSE mount (/gcs/...), with no copy before "
            "or after the command",
            "mount (the default) or direct (the gs:// URI)",
            mounted_at=lambda path: "/gcs/" + path.removeprefix("gs://"),
        )
    else:
        gs = Reach(
            frozenset({None, "direct"}),
            "it has no Cloud Storage FUSE mount, so the command gets the gs:// URI and reads it with a Cloud Storage "
            "client (gcsfs, tf.io.gfile)",
            "direct, or leave `mode` out; the vertex target mounts it at /gcs/",
        )
    elsewhere = Reach(
        frozenset({"direct"}),
        f"it {'mounts' if fuse else 'reads'} only Cloud Storage; another cloud's URI reaches the code as is, for a "
        "client with its own credentials",
        "direct, or copy the data to gs://",
    )
    return Placement(
        platform,
        {"gs": gs, "azure": elsewhere, "s3": elsewhere},
        "gs:// locations" + ("" if fuse else " (as URIs)") + ", or other cloud URIs with mode: direct",
        azure_types_fix="use type: folder or file",
    )


def staging_check(staging_bucket: str | None, make_client: Callable[[], Client]) -> Check:
    """`crosstrain check`'s read of the staging bucket (both Google targets): it exists and this account sees it
    (`buckets.get`); writing is not tried, since a check creates nothing."""
    from crosstrain.preflight import Check, Outcome, classify

    if not staging_bucket:
        return Check("staging", Outcome.OK, "the job ships no code: no staging bucket is used")
    bucket = staging_bucket.removeprefix("gs://").partition("/")[0]
    try:
        found = make_client().lookup_bucket(bucket)
    except Exception as error:  # any failure of a read is a check's outcome, not a crash
        name = type(error).__name__
        outcome = Outcome.PERMISSION if name in ("Forbidden", "Unauthorized") else classify(None, str(error))
        fix = f"grant the account roles/storage.objectAdmin on gs://{bucket}, or set staging_bucket to one it can write"
        return Check("staging", outcome, (str(error).splitlines() or [name])[0][:300], fix)
    if found is None:
        return Check(
            "staging",
            Outcome.NOT_FOUND,
            f"gs://{bucket} does not exist",
            f"create it (gcloud storage buckets create gs://{bucket}), or set staging_bucket to one that exists",
        )
    return Check("staging", Outcome.OK, f"gs://{bucket} exists (writing is not tried: no create call)")
