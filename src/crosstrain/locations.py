"""The data-location parser: what a location a job names is (Cloud Storage, an Azure ML asset or datastore, Azure
Storage, S3, a Unity Catalog volume, DBFS, a local path), and the folder a function job's result goes in under an
output folder. The one place outside the platform packages that knows their storage schemes. Standard library only."""

from __future__ import annotations

import re

FORMS_TEXT = (
    "gs://BUCKET/PATH, azureml:NAME:VERSION, azureml:NAME@latest, azureml://..., abfss://..., "
    "https://ACCOUNT.blob.core.windows.net/..., s3://BUCKET/PATH, /Volumes/..., dbfs:/..., or a local path"
)
ASSET = re.compile(r"azureml:[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}(?::[A-Za-z0-9_.-]{1,30}|@latest)")
SCHEMES = ("gs", "azureml", "abfss", "abfs", "wasbs", "https", "s3", "dbfs")
MODES = {"inputs": ("mount", "download", "direct"), "outputs": ("mount", "upload", "direct")}


def kind(path: str) -> str:
    """Where a data location lives: gs, azureml (a registered asset or an azureml:// URI), azure (abfss://,
    wasbs://, https://), s3, volume (/Volumes/...), dbfs, or local."""
    if path.startswith("azureml:"):
        return "azureml"
    if path.startswith("/Volumes/"):
        return "volume"
    scheme, sep, _ = path.partition(":")
    if sep and scheme.lower() in SCHEMES:
        return {"abfs": "azure", "abfss": "azure", "wasbs": "azure", "https": "azure"}.get(
            scheme.lower(), scheme.lower()
        )
    return "local"


_BUCKET_CHARACTERS = re.compile(r"[a-z0-9._-]+")


def bucket_problem(location: str) -> str | None:
    """Why a gs:// location's bucket is no Cloud Storage bucket name, or None (its naming rules: 3-63 lowercase
    letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit; up to 222 with dots, each
    dot-separated part at most 63; https://cloud.google.com/storage/docs/buckets#naming)."""
    bucket = location.removeprefix("gs://").partition("/")[0]
    if not bucket:
        return "it names no bucket"
    if not _BUCKET_CHARACTERS.fullmatch(bucket):
        return f"bucket names hold only lowercase letters, digits, '-', '_' and '.', and {bucket!r} does not"
    if not (bucket[0] + bucket[-1]).isalnum():
        return f"bucket names start and end with a letter or digit, and {bucket!r} does not"
    longest = 222 if "." in bucket else 63
    if not 3 <= len(bucket) <= longest:
        return f"bucket names are 3-63 characters (up to 222 with dots), and {bucket!r} has {len(bucket)}"
    if any(len(part) > 63 for part in bucket.split(".")):
        return f"each dot-separated part of a bucket name is at most 63 characters, and {bucket!r} has a longer one"
    return None


#: The kinds of location an Azure ML `mltable` or model can be.
TABLE_KINDS = ("azureml", "azure", "local")
#: The data types only Azure ML reads (`type:`), as messages name them.
AZURE_TYPES = {
    "table": "a table is an Azure ML mltable",
    "mlflow_model": "an mlflow_model is an Azure ML model (MLflow format)",
    "custom_model": "a custom_model is an Azure ML model",
}


#: What each kind of location is called in messages.
KIND_TITLES = {
    "gs": "Cloud Storage",
    "azureml": "an Azure ML data asset or datastore",
    "azure": "Azure Storage",
    "s3": "Amazon S3",
    "volume": "a Unity Catalog volume",
    "dbfs": "DBFS",
    "local": "a local path",
}


#: The folder under a job's `output_dir` where rank 0 of a function job leaves its result.
RESULT_FOLDER = "crosstrain-result"
