"""What crosstrain shows: credentials redacted from every message, remote text harmless on a terminal and in a
notebook (`crosstrain.safe`), and the errors, statuses and displays that apply them."""

from __future__ import annotations

import io

import pytest

from crosstrain.errors import Problem, SpecError, SubmitError, TransientError
from crosstrain.progress import Progress
from crosstrain.records import JobHandle, JobState, JobStatus
from crosstrain.safe import href, redact, terminal

DAPI = "dapi0123456789abcdef0123456789abcdef"

#: text with a credential -> the credential, which must not survive.
SECRETS = {
    "https://u:PW-1@example.com/x": "PW-1",
    "git+https://oauth2:glpat-TOKEN1@gitlab.com/a/b.git": "glpat-TOKEN1",
    "https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/o/r": "ghp_abcdefghij",
    "https://user:p@ss@host/path": "p@ss",
    "'https://user:very-long-password…": "very-long-password",  # cut short by a message before its @
    '{"error": "bad header Authorization: Bearer ya29.xxx"}': "ya29.xxx",
    "{'Authorization': 'Basic dXNlcjpwYXNz'}": "dXNlcjpwYXNz",
    "authorization=SharedKey account:c2lnbmF0dXJl": "c2lnbmF0dXJl",
    "{'x-azureml-token': 'eyJhbGciOiJIUzI1NiJ9.eyJhdWQiOiJtbCJ9.c2ln'}": "eyJhdWQiOiJtbCJ9",
    "got bearer abc.def-ghi.jkl from the proxy": "abc.def-ghi.jkl",
    f"token {DAPI} expired": DAPI,
    f"token {DAPI}-2 expired": DAPI,
    "ya29.a0AfH6SMBx-token_value": "a0AfH6SMBx",
    "refresh 1//0gLongRefreshTokenValue": "LongRefreshTokenValue",
    "https://acct.blob.core.windows.net/c/b?sv=2022-11-02&sig=abc%2Bdef%3D&se=2030": "abc%2Bdef",
    '{"access_token": "opaque-value-1", "expires_in": 3599}': "opaque-value-1",
    "client_secret=opaque-value-2&grant_type=x": "opaque-value-2",
    "key AIzaSyA-abcdefghijklmnopqrstuvwxyz01234": "abcdefghijklmnop",
}

#: Text with no credential, left as it is.
PLAIN = [
    "the bearer token was refused",
    "send the Authorization header",
    "https://dbc-1.cloud.databricks.com:8443/api/2.1/jobs/runs/get?run_id=7",
    "ssh://github.com/o/r and mail@example.com",
    "n1-highcpu-16, a2-highgpu-8g",
    '{"url":"https://host","email":"a@b"}',
]


@pytest.mark.parametrize("text", list(SECRETS))
def test_every_credential_shape_is_redacted(text: str) -> None:
    shown = redact(text)
    assert SECRETS[text] not in shown
    assert "***" in shown
    assert redact(shown) == shown  # idempotent: an error redacted twice reads the same


@pytest.mark.parametrize("text", PLAIN)
def test_text_without_credentials_is_unchanged(text: str) -> None:
    assert redact(text) == text


def test_errors_and_statuses_hold_no_credential_however_they_are_shown() -> None:
    body = f'{{"error": "bad header Authorization: Bearer {DAPI}", "url": "https://u:PW-9@x"}}'
    for error in (SubmitError(body), TransientError(body, accepted=None), SpecError([Problem("p", body, body)])):
        shown = [str(error), repr(error), *map(str, error.args)]
        shown += [str(p.to_dict()) for p in getattr(error, "problems", ())]
        assert not [text for text in shown if DAPI in text or "PW-9" in text]
    assert DAPI not in JobStatus(JobState.FAILED, "FAILED", body).message


#: Escape sequences a platform's message or a job's logs may carry: a clipboard write (OSC 52), clear screen,
#: a window title (OSC 0), a hidden link (OSC 8), a carriage return that rewrites the line, the one-byte CSI,
#: and a right-to-left override.
HOSTILE = (
    "\x1b]52;c;cm0gLXJmIH4=\x07"
    "\x1b[2J"
    "\x1b]0;pwned\x07"
    "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"
    "\rfake line"
    "\x9b2J"
    "\u202egnp.exe"
)
RAW = ("\x1b", "\x07", "\r", "\x9b", "\u202e")


def test_terminal_shows_every_control_as_its_escape_and_keeps_lines() -> None:
    shown = terminal(f"{HOSTILE}\n\tnext")
    assert not [c for c in RAW if c in shown]
    assert shown.startswith("\\x1b]52;c;")
    assert "\\r" in shown
    assert shown.endswith("\\u202egnp.exe\n\tnext")


def test_the_wait_line_shows_the_platforms_words_as_text() -> None:
    stream = io.StringIO()
    progress = Progress("job-1", f"https://x/{HOSTILE}", stream=stream, clock=lambda: 0.0, live=True)
    progress(JobStatus(JobState.FAILED, HOSTILE, HOSTILE))
    written = stream.getvalue()
    assert written.count("\r\x1b[K") == written.count("\x1b") == 2  # only the live line's own rewrite
    assert not [c for c in ("\x07", "\x9b", "\u202e") if c in written]


@pytest.mark.parametrize(
    "url", ["javascript:alert(document.cookie)", "JavaScript:alert(1)", "data:text/html,<b>x</b>", "https://u:p@x/"]
)
def test_a_console_url_that_is_not_http_is_never_a_link(url: str) -> None:
    shown = JobHandle("vertex", "job-1", "1", console_url=url)._repr_html_()
    assert "<a " not in shown
    assert href(url) is None
    assert "<b>x</b>" not in shown  # escaped, shown as text
    assert ":p@" not in shown


def test_an_https_console_url_is_a_link() -> None:
    url = "https://console.cloud.google.com/vertex-ai/training/custom-jobs/1?project=p&x='y'"
    assert href(url) is None  # a quote in it: not made a link
    shown = JobHandle("vertex", "job-1", "1", console_url=url.split("&")[0])._repr_html_()
    assert '<a href="https://console.cloud.google.com/vertex-ai/training/custom-jobs/1?project=p"' in shown
