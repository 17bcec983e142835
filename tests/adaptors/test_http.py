"""The one reading of HTTP statuses and connection failures that every adaptor uses."""

from __future__ import annotations

import socket
import threading

import pytest
import requests

from crosstrain.adaptors.http import connection_error, error_for_status, never_sent, parse_retry_after
from crosstrain.errors import SubmitError, TransientError


def test_parse_retry_after() -> None:
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


@pytest.mark.parametrize(
    ("code", "kind", "accepted"),
    [
        (429, TransientError, False),
        (503, TransientError, False),
        (500, TransientError, None),
        (502, TransientError, None),
        (504, TransientError, None),
        (408, TransientError, None),
        (400, SubmitError, None),
        (404, SubmitError, None),
        (501, SubmitError, None),
    ],
)
def test_every_backend_reads_http_statuses_alike(code: int, kind: type, accepted: bool | None) -> None:
    error = error_for_status(code, f"{code} from somewhere", "7")
    assert type(error) is kind
    assert str(error) == f"{code} from somewhere"
    if isinstance(error, TransientError):
        assert error.accepted is accepted
        assert error.retry_after == 7.0
    assert error_for_status(204, "fine") is None


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_a_refused_connection_was_never_sent() -> None:
    with pytest.raises(requests.ConnectionError) as failed:
        requests.post(f"http://127.0.0.1:{_closed_port()}/jobs", json={}, timeout=5)
    assert never_sent(failed.value)
    assert connection_error(failed.value, "POST /jobs").accepted is False


def test_a_connection_dropped_after_sending_is_an_unknown_outcome() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def read_then_hang_up() -> None:
        conn, _ = server.accept()
        conn.recv(65536)
        conn.close()

    thread = threading.Thread(target=read_then_hang_up)
    thread.start()
    with pytest.raises(requests.ConnectionError) as failed:
        requests.post(f"http://127.0.0.1:{server.getsockname()[1]}/jobs", json={}, timeout=5)
    thread.join()
    server.close()
    assert not never_sent(failed.value)
    assert connection_error(failed.value, "POST /jobs").accepted is None


def test_a_read_timeout_is_an_unknown_outcome() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    with pytest.raises(requests.ReadTimeout) as failed:
        requests.post(f"http://127.0.0.1:{server.getsockname()[1]}/jobs", json={}, timeout=0.2)
    server.close()
    assert connection_error(failed.value, "POST /jobs").accepted is None
