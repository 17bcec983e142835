"""`vertex`: Vertex AI CustomJobs, with Reduction Server, through `google.cloud.aiplatform_v1.JobServiceClient`.

Render builds the `customJobs.create` call in the API's own JSON encoding (camelCase, int64 as strings,
durations as `"<seconds>s"`, enums by name). Vertex has no idempotency key, so the render-time identity goes
into a label (`crosstrain-id`) and the request's fingerprint into another (`crosstrain-fp`). Submit lists jobs
by the identity label first and adopts the earliest live one if its fingerprint is this request's (cancelled
jobs do not count: cancelling frees the identity). After a create whose outcome is unknown it looks for the label
for a settling window before creating again. After every create it lists the label again, keeps the earliest
job (creation time, then name) and cancels the others, so concurrent submitters all return the same job.
Every call goes through `crosstrain.adaptors.gapic`, with a client timeout and no GAPIC retry of its own.

A handle or a request from a file is sent only to Vertex AI's regional endpoints
(`<region>-aiplatform.googleapis.com`), in the configured project where one is set, checked before any
credential is loaded.

A job with `code:` ships the folder as one sdist (`crosstrain.packaging`) to the `staging_bucket` setting,
at a content-addressed object (`<prefix>/crosstrain/code/<digest>/crosstrain_code-1.0.tar.gz`), before the
create; the upload is the request's first call, and an object that already holds the bundle is not sent again.
A pool on a pre-built PyTorch container (`environment: pytorch[:X.Y]`, or `targets.vertex.environment` naming
an executor image) gets a `pythonPackageSpec`: Vertex pip-installs the package (and the job's requirements, its
install_requires) and runs `python -m crosstrain_code -- COMMAND`. A pool on your own `image` gets a
`containerSpec` whose command unpacks the sdist from the Cloud Storage FUSE mount (`/gcs/<bucket>/<object>`)
with the standard library and runs the same bootstrap (`--install` pip-installs the requirements there).

Pool positions are Vertex's: [0] primary (one replica), [1] workers, [2] reduction server or parameter
servers, [3] evaluators; a skipped pool before a used one is `{}`, trailing empty pools are left out.
Sources: https://cloud.google.com/vertex-ai/docs/training/distributed-training and
https://cloud.google.com/vertex-ai/docs/reference/rest/v1/CustomJobSpec.
"""

from crosstrain.backends.vertex.backend import VertexBackend
from crosstrain.backends.vertex.settings import VertexSettings

__all__ = ["VertexBackend", "VertexSettings"]
