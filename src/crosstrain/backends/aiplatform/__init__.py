"""`aiplatform`: legacy AI Platform Training (`ml.googleapis.com/v1`), a `Job` with a CUSTOM `trainingInput`.

Google shut the service down on 2025-01-31; the backend stays for rendering, offline validation and
projects that still hold its jobs. The same job file renders for Vertex AI with `--target vertex`.

The API has fixed pools (master, workers, parameter servers, evaluators), one `ReplicaConfig` each, an
accelerator enum that ends at `NVIDIA_TESLA_A100`, and no field for environment variables. `jobId` is chosen
by the client and a second create with the same id is refused with `409 ALREADY_EXISTS`, so the jobId
derived from the render-time identity is the idempotency key: a create that meets 409 reads the job and adopts
it only if its `crosstrain-id` label is this identity and its `crosstrain-fp` label this request's fingerprint
(a job made from another request is an `IdentityConflict`, and nothing is created).

A job with `code:` ships the folder as one sdist (`crosstrain.packaging`) to the `staging_bucket` setting, at a
content-addressed object, before the create (google-cloud-storage; an object that already holds the bundle is
not sent again). The job then names it in `trainingInput.packageUris`, with `pythonModule` `crosstrain_code`
(the bundle's bootstrap) and `args` `-- COMMAND...`, on a pre-built PyTorch container as every pool's
`imageUri` (`environment: pytorch[:X.Y]`, `targets.aiplatform.environment`) or your own image, or on a
`runtime_version`. The package carries the job's requirements (its install_requires).

Requests go over REST with google-auth's `AuthorizedSession`, through `crosstrain.adaptors.google_rest`
(imported only when something is sent), which maps every failure to crosstrain's three kinds. A handle or a
request from a file goes only to Google's endpoints (ml.googleapis.com, ml.mtls.googleapis.com) or the
configured `endpoint`, in the configured project where one is set, checked before credentials are loaded.
"""

from crosstrain.backends.aiplatform.backend import AIPlatformBackend
from crosstrain.backends.aiplatform.settings import AIPlatformSettings

__all__ = ["AIPlatformBackend", "AIPlatformSettings"]
