"""What crosstrain shows the user: secrets redacted from every message, and text from a platform made harmless on
a terminal and in a notebook.

One redaction (`redact`) for every message crosstrain prints or raises: errors redact their message and each
problem as they are made, job statuses and log lines as they are read, and the CLI whatever it prints. One
sanitizer (`terminal`) for remote text on a terminal: a platform's state message, a job's logs, an error body
or a console URL can carry escape sequences that write the clipboard, retitle the window, clear the screen or
hide a link. And `href`, for the only links a notebook display makes. Standard library only: errors and the
node side import it.
"""

from __future__ import annotations

import re
from typing import Any

#: `scheme://userinfo@`: a URL that carries a user name or secret before its host.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s]*)@")


def url_credentials(text: str) -> bool:
    """Whether `text` holds a URL with credentials: any userinfo on http(s) (`git+https://` too), a password on
    other schemes (`ssh://git@host` names a user, not a secret)."""
    for match in _USERINFO.finditer(text):
        scheme = match["scheme"].lower()[: -len("://")].rsplit("+", 1)[-1]  # the match ends in ://
        if scheme in ("http", "https") or ":" in match["userinfo"]:
            return True
    return False


_TOKEN = r"[A-Za-z0-9._~+/-]"
#: Each pattern's `secret` group is replaced by `***`; the rest (a scheme, a header name) stays, so a message still
#: says what was there. Quantifiers are bounded where a match may fail after a long scan.
_SECRETS = tuple(
    re.compile(pattern)
    for pattern in (
        # scheme://user:secret@host (up to the last @ before the path: a secret may hold an unencoded @)
        r"[A-Za-z][A-Za-z0-9+.-]*://(?P<secret>[^/?#\s\"'<>]*)@",
        # scheme://user:secr… cut short by a message before its @ could be seen
        r"[A-Za-z][A-Za-z0-9+.-]*://(?P<secret>[^/?#\s\"'<>@]+)(?=…|\.\.\.)",
        # an Authorization header's value (or Azure ML's x-azureml-token's), as a header, JSON or a query:
        # `Authorization: Bearer x`
        r"(?i)\b(?:(?:proxy-)?authorization|x-azureml-token)[\"']?\s*[:=]\s*[\"']?"
        r"(?:(?:bearer|basic|token|sharedkey|sharedaccesssignature|digest|negotiate)\s+)?(?P<secret>[^\s\"',;}\]]+)",
        # a bearer token anywhere ("bearer token" is words: a token holds a digit or punctuation)
        rf"(?i)\bbearer\s+(?P<secret>(?={_TOKEN}{{0,4096}}[0-9._~+/-]){_TOKEN}{{6,4096}}=*)",
        # credentials as JSON fields or query parameters
        r"(?i)\b(?:access_token|refresh_token|id_token|client_secret|password|passwd|api[_-]?key|private_key)"
        r"[\"']?\s*[:=]\s*[\"']?(?P<secret>[^\s\"',;&}\]]+)",
        # an Azure SAS signature
        r"(?i)(?<![A-Za-z0-9_])sig=(?P<secret>[^&\s\"'#<>]+)",
        # the platforms' token shapes: Databricks personal access tokens, Google OAuth access and refresh
        # tokens and API keys, GitHub tokens
        r"\b(?P<secret>dapi[0-9a-f]{16,}(?:-\d+)?)",
        r"\b(?P<secret>ya29\.[0-9A-Za-z_.~+/-]+)",
        r"\b(?P<secret>1//0[0-9A-Za-z_-]{10,})",
        r"\b(?P<secret>AIza[0-9A-Za-z_-]{30,})",
        r"\b(?P<secret>(?:gh[pousr]_|github_pat_)[A-Za-z0-9_]{20,})",
    )
)


def _hide(match: re.Match[str]) -> str:
    start, end = match.span("secret")
    return match[0][: start - match.start()] + "***" + match[0][end - match.start() :]


def redact(text: str) -> str:
    """`text` with every credential crosstrain can recognise replaced by `***`: the userinfo of URLs,
    Authorization header values, bearer tokens, token and password fields, SAS signatures, and the token shapes
    of Databricks (`dapi…`), Google (`ya29.…`) and GitHub. Idempotent."""
    for pattern in _SECRETS:
        text = pattern.sub(_hide, text)
    return text


#: What a terminal acts on rather than shows: C0 controls but newline and tab (ESC starts every escape
#: sequence; CR rewrites a line), DEL, C1 controls (CSI and OSC in one byte) and the bidirectional overrides
#: that reorder what is shown.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def terminal(text: str) -> str:
    """Remote text fit for a terminal: every control character shown as its escape (`\\x1b`, `\\r`, `\\u202e`),
    so no sequence in it acts; newlines and tabs are kept."""
    return _CONTROL.sub(lambda m: repr(m[0])[1:-1], text)


def json_text(text: str) -> str:
    """JSON text (`json.dumps`'s) with what JSON leaves raw but a terminal acts on (DEL, C1 controls, the
    bidirectional overrides) written as `\\uXXXX`: the same JSON value, and no sequence acts when it is shown.
    Outside strings JSON text holds no such character, so every one replaced is inside a string."""
    return _CONTROL.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def href(url: str) -> str | None:
    """`url` if a notebook may make it a link: http or https, with a host, no credentials and nothing a browser
    would read otherwise (controls, spaces, quotes); else None (a `javascript:` URL is never a link)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
        return None
    if re.search(r"[\x00-\x20\x7f-\x9f\"'<>`\\]", url):
        return None
    return url


def redact_all(value: Any) -> Any:
    """`value` with every string in it (in lists and mappings too) redacted: what `--json` prints as it is."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [redact_all(item) for item in value]
    if isinstance(value, dict):
        return {key: redact_all(item) for key, item in value.items()}
    return value
