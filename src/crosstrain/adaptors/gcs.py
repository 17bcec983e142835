"""google-cloud-storage, for the Google backends that ship a job's code to a staging bucket.

Owns the lazy import of `google.cloud.storage` with its install hint, the client (Application Default
Credentials; `STORAGE_EMULATOR_HOST` points it at an emulator with anonymous credentials, as the library
itself does), and the content-addressed upload: an object that already holds this bundle (its name carries the
digest, its metadata the full sha256) is not sent again. Failures map to crosstrain's three kinds through
`crosstrain.adaptors.gapic.translate` (google-api-core, google-auth and requests errors, as the GAPIC clients
raise them). Nothing here imports a Google package at import time.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tempfile
from typing import IO, TYPE_CHECKING, Any, cast

from crosstrain.adaptors import gapic, require

if TYPE_CHECKING:
    from google.cloud.storage import Client

    from crosstrain.packaging import Bundle

#: The object metadata key that holds the bundle's full sha256.
DIGEST_KEY = "crosstrain-sha256"
#: Archives up to this size are built in memory, larger ones in a temporary file.
_IN_MEMORY = 64 * 1024**2


def storage(extra: str) -> Any:
    """`google.cloud.storage`, or MissingDependency with `pip install 'crosstrain[<extra>]'`."""
    return require("google.cloud.storage", extra)


def client(project: str | None, *, extra: str) -> Client:
    """A storage client for `project` with Application Default Credentials (or the emulator's anonymous ones)."""
    module = storage(extra)
    with gapic.calling("connect to Cloud Storage"):
        made: Client = module.Client(project=project)
    return made


def holds(client: Client, bucket: str, name: str, bundle: Bundle, *, timeout: float) -> bool:
    """Whether gs://bucket/name holds the bundle's archive, byte for byte: its name and metadata say which
    bundle, but Cloud Storage keeps both when the object is truncated or replaced, so its size and the md5
    the service computed must be the archive's too."""
    with gapic.calling(f"look for gs://{bucket}/{name}"):
        blob = client.bucket(bucket).get_blob(name, timeout=timeout, retry=None)
    if blob is None or (blob.metadata or {}).get(DIGEST_KEY) != bundle.digest:
        return False
    size, md5 = archive_sums(bundle)
    return bool(blob.size == size and blob.md5_hash == md5)


class _Summing(io.RawIOBase):
    """A sink that keeps only the size and md5 of what is written to it."""

    def __init__(self) -> None:
        self.size, self.md5 = 0, hashlib.md5(usedforsecurity=False)

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.md5.update(data)
        self.size += len(data)
        return len(data)


#: The size and md5 of the archives this process wrote or uploaded, by their bundle's digest: a bundle's archive
#: is the same bytes whenever it is written (`Bundle.write_archive`), so an unchanged re-submit checks an object
#: (`holds`) without writing the archive again to learn them.
_SUMS: dict[str, tuple[int, str]] = {}


def _remember(digest: str, sums: tuple[int, str]) -> tuple[int, str]:
    if len(_SUMS) > 64:
        _SUMS.clear()
    _SUMS[digest] = sums
    return sums


def archive_sums(bundle: Bundle) -> tuple[int, str]:
    """The size of the bundle's archive and its md5 as Cloud Storage reports it (base64), without keeping it."""
    known = _SUMS.get(bundle.digest)
    if known is not None:
        return known
    sink = _Summing()
    bundle.write_archive(cast(IO[bytes], sink))
    return _remember(bundle.digest, (sink.size, base64.b64encode(sink.md5.digest()).decode()))


def upload(client: Client, bucket: str, name: str, bundle: Bundle, *, timeout: float) -> None:
    """Upload the bundle's sdist to gs://bucket/name, checked end to end by its md5 (the client's own check)."""
    with tempfile.SpooledTemporaryFile(max_size=_IN_MEMORY) as archive:
        bundle.write_archive(archive)
        size = archive.tell()
        archive.seek(0)
        blob = client.bucket(bucket).blob(name)
        blob.metadata = {DIGEST_KEY: bundle.digest}
        with gapic.calling(f"upload gs://{bucket}/{name}"):
            blob.upload_from_file(
                archive, size=size, content_type="application/gzip", checksum="md5", timeout=timeout, retry=None
            )
    if blob.size == size and isinstance(blob.md5_hash, str):  # the service's md5, which the client checked
        _remember(bundle.digest, (size, blob.md5_hash))


def ship(client: Client, bucket: str, name: str, bundle: Bundle, *, timeout: float) -> bool:
    """Upload the bundle unless it is already there; True when it was uploaded."""
    if holds(client, bucket, name, bundle, timeout=timeout):
        return False
    upload(client, bucket, name, bundle, timeout=timeout)
    return True


def read(client: Client, bucket: str, name: str, *, timeout: float, limit: int) -> bytes | None:
    """gs://bucket/name's bytes (checked by md5), None where there is no such object; an object over `limit`
    bytes is refused (`TooLarge`) before it is read."""
    with gapic.calling(f"look for gs://{bucket}/{name}"):
        blob = client.bucket(bucket).get_blob(name, timeout=timeout, retry=None)
    if blob is None:
        return None
    if (blob.size or 0) > limit:
        raise TooLarge(int(blob.size))
    with gapic.calling(f"read gs://{bucket}/{name}"):
        data: bytes = blob.download_as_bytes(timeout=timeout, checksum="md5", retry=None)
    return data


class TooLarge(Exception):
    """An object larger than the caller reads into memory."""

    def __init__(self, size: int) -> None:
        super().__init__(f"{size:,} bytes")
        self.size = size
