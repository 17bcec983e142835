"""`crosstrain.adaptors.gcs`: the content-addressed upload with the real google-cloud-storage client against
the real gcp-storage-emulator, the install hint, and failures as crosstrain's kinds."""

from __future__ import annotations

import base64
import hashlib
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crosstrain import packaging
from crosstrain.adaptors import gcs
from crosstrain.errors import MissingDependency, SubmitError, TransientError


@pytest.fixture
def client() -> Iterator[Any]:
    from gcp_storage_emulator.server import create_server
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="staging")
    server.start()
    try:
        anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]
        options = {"api_endpoint": f"http://127.0.0.1:{port}"}
        yield storage.Client(project="p", credentials=anonymous, client_options=options)
    finally:
        server.stop()


def bundle(folder: Path, text: str = "print('hi')\n") -> packaging.Bundle:
    folder.mkdir(exist_ok=True)
    (folder / "train.py").write_text(text)
    return packaging.bundle(folder)


def test_ship_uploads_once_and_then_finds_the_digest(client: Any, tmp_path: Path) -> None:
    made = bundle(tmp_path / "code")
    assert gcs.ship(client, "staging", "a/pkg.tar.gz", made, timeout=10) is True
    blob = client.bucket("staging").get_blob("a/pkg.tar.gz")
    assert blob.metadata == {gcs.DIGEST_KEY: made.digest}
    assert blob.content_type == "application/gzip"
    assert blob.download_as_bytes(checksum="md5") == made.archive()
    assert gcs.ship(client, "staging", "a/pkg.tar.gz", made, timeout=10) is False


def test_an_object_without_this_digest_is_replaced(client: Any, tmp_path: Path) -> None:
    client.bucket("staging").blob("a/pkg.tar.gz").upload_from_string(b"not ours")
    made = bundle(tmp_path / "code")
    assert gcs.ship(client, "staging", "a/pkg.tar.gz", made, timeout=10) is True
    assert client.bucket("staging").blob("a/pkg.tar.gz").download_as_bytes() == made.archive()


def test_an_unchanged_resubmit_checks_the_object_without_writing_the_archive_again(
    client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = bundle(tmp_path / "code", "print('resubmitted')\n")
    archive = made.archive()
    assert gcs.ship(client, "staging", "b/pkg.tar.gz", made, timeout=10) is True

    def written(self: packaging.Bundle, out: Any) -> None:
        raise AssertionError("the archive was written again")

    monkeypatch.setattr(packaging.Bundle, "write_archive", written)
    assert gcs.archive_sums(made) == (len(archive), base64.b64encode(hashlib.md5(archive).digest()).decode())
    assert gcs.ship(client, "staging", "b/pkg.tar.gz", made, timeout=10) is False  # its size and md5 remembered
    client.bucket("staging").blob("b/pkg.tar.gz").upload_from_string(b"truncated", content_type="application/gzip")
    blob = client.bucket("staging").get_blob("b/pkg.tar.gz")
    blob.metadata = {gcs.DIGEST_KEY: made.digest}
    blob.patch()
    assert gcs.holds(client, "staging", "b/pkg.tar.gz", made, timeout=10) is False  # our digest on other bytes


def test_a_missing_bucket_is_a_final_error_that_names_the_object(client: Any, tmp_path: Path) -> None:
    made = bundle(tmp_path / "code")
    with pytest.raises(SubmitError, match=r"gs://nowhere/x\.tar\.gz") as failed:
        gcs.ship(client, "nowhere", "x.tar.gz", made, timeout=10)
    assert not isinstance(failed.value, TransientError)


def test_an_unreachable_storage_is_a_transient_refusal(tmp_path: Path) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens
    anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]
    dead = storage.Client(
        project="p", credentials=anonymous, client_options={"api_endpoint": f"http://127.0.0.1:{port}"}
    )
    with pytest.raises(TransientError) as failed:
        gcs.ship(dead, "staging", "x.tar.gz", bundle(tmp_path / "code"), timeout=5)
    assert failed.value.accepted is False


def test_without_the_library_the_error_says_which_extra_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.cloud.storage", None)
    with pytest.raises(MissingDependency, match=r"crosstrain\[vertex\]"):
        gcs.client("p", extra="vertex")
