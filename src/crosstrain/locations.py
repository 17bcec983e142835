"""The data-location parser: what a location a job names is (Cloud Storage, an Azure ML asset or datastore, Azure
Storage, S3, a Unity Catalog volume, DBFS, a local path), and where a function job's result goes under an output
folder. The one place outside the platform packages that knows their storage schemes. Standard library only."""

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


def result_folder(output_dir: str | None) -> tuple[str, str] | None:
    """Where a function job's result goes, given the job's `output_dir`: the folder as a node's file system
    sees it (Cloud Storage through its FUSE mount, DBFS through /dbfs, a volume as it is) and as its storage
    names it; None where no node mounts the output folder."""
    if not output_dir:
        return None
    base = output_dir.rstrip("/")
    if base.startswith("gs://"):
        node = "/gcs/" + base.removeprefix("gs://")
    elif base.startswith("dbfs:/"):
        node = "/dbfs/" + base.removeprefix("dbfs:/").lstrip("/")
    elif base.startswith("/Volumes/"):
        node = base
    else:
        return None
    return f"{node}/{RESULT_FOLDER}", f"{base}/{RESULT_FOLDER}"
