"""Where a platform's credential may go, declared as data: the base checks every handle and every request it did
not make itself against its platform's `Binding` before any credential is loaded.

A platform says which origins its credential goes to (a fixed set, and the one a setting configures), the URL
path every call must have (its named groups are the settings that place a job: project, subscription, workspace)
and how those names compare. A handle or a request states where it is (its `ref` or `settings`); its URLs must be
on an allowed origin, inside what it states, and what it states must be what this machine configures.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from crosstrain.errors import Problem
from crosstrain.frozen import frozen
from crosstrain.safe import redact, url_credentials


def origin_of(url: object) -> str | None:
    """`scheme://host[:port]` of a URL, lowercased, the scheme's default port left out; None when it is not a
    string with an http(s) scheme and a host, or carries credentials (never compared, so never sent to)."""
    if not isinstance(url, str):
        return None
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname or url_credentials(url):
        return None
    host = parts.hostname.lower().rstrip(".")
    if ":" in host:
        host = f"[{host}]"
    default = {"http": 80, "https": 443}[scheme]
    return f"{scheme}://{host}" + (f":{port}" if port not in (None, default) else "")


def shown(value: Any, limit: int = 200) -> str:
    """A value from a handle or a request as a message quotes it: credentials in URLs redacted, cut short."""
    text = redact(value if isinstance(value, str) else json.dumps(value, default=str))
    return repr(text if len(text) <= limit else text[:limit] + "...")


@frozen
class Place:
    """Somewhere a handle's reads or a request's call would send the credential: `url` (None where the value
    cannot be one, `value` then is what the message shows), at `at`; `path` where the handle names the path
    apart from its host (then reported at `path_at`)."""

    at: str
    url: Any
    value: Any = None
    path: Any = None
    path_at: str | None = None


@frozen
class Configured:
    """The origin this machine configures for the binding's `origin_key` (None: none), and where from."""

    origin: str | None
    source: str


@frozen
class Binding:
    """Where one platform's credential goes, and what places a job there."""

    #: The fixed origins the credential goes to, and how a message names them (None: only the configured one).
    origins: re.Pattern[str] | None
    service: str | None
    #: The clause that ends a refusal, e.g. "Google credentials go nowhere else".
    nowhere_else: str
    #: Whom a good handle or request is made for, in a fix ("Vertex AI").
    made_for: str
    #: The path every URL has (None: any); its named groups that are `keys` are compared.
    path: re.Pattern[str] | None = None
    url_form: str = "a URL crosstrain makes"
    #: The settings that place a job (in the path, a handle's ref and a request's settings), what they name
    #: together, the form each has, and which a handle or request must state.
    keys: tuple[str, ...] = ()
    scope: str = "project"
    names: re.Pattern[str] = re.compile(r"[^/?#\s]+")
    name_form: str = "a name"
    required: tuple[str, ...] = ()
    #: Names compared ignoring case (Azure's).
    fold_case: bool = False
    #: Whether a number may stand for a name (Google's project numbers): it cannot be compared, and passes.
    numbered: bool = False
    #: The setting whose value is one more origin the credential goes to (an endpoint, a workspace host), and
    #: what it names; other ways to configure it, for the fix.
    origin_key: str | None = None
    origin_noun: str = "endpoint"
    configure_also: str = ""

    def problems(
        self,
        places: Sequence[Place],
        stated: Mapping[str, Any],
        at: str,
        what: str,
        configured: Mapping[str, Any],
        mine: Configured,
        env: Mapping[str, str],
    ) -> list[Problem]:
        """Where `places` (a handle's or a request's) and what it `stated` (at `at`) leave this binding, for a
        machine that configures `configured` (the keys) and `mine` (the origin); `env` names each key's
        variable, for the fix."""
        problems = self._stated_problems(stated, at, what, configured, env)
        if problems:
            return problems
        key = self.origin_key
        said = origin_of(stated.get(key)) if key else None
        if key and said is not None:  # the stated origin first: the one every place must be on
            problems += self._origin_problems(Place(f"{at}.{key}", stated[key]), None, what, mine, env)
        for place in places:
            problems += self._origin_problems(place, said, what, mine, env)
            problems += self._path_problems(place, stated, what, configured, env)
        return problems

    def _stated_problems(
        self, stated: Mapping[str, Any], at: str, what: str, configured: Mapping[str, Any], env: Mapping[str, str]
    ) -> list[Problem]:
        problems = []
        for key in self.keys:
            value = stated.get(key)
            if value is None and key not in self.required:
                continue
            if not isinstance(value, str) or not self.names.fullmatch(value):
                problems.append(Problem(f"{at}.{key}", f"{shown(value)} is not {self.name_form}", "use it as made"))
            elif self._differs(value, configured.get(key)):
                problems.append(self._elsewhere(f"{at}.{key}", key, value, configured[key], what, env))
        if self.origin_key is None:
            return problems
        value = stated.get(self.origin_key)
        if (value is not None or self.origin_key in self.required) and origin_of(value) is None:
            secret = isinstance(value, str) and url_credentials(value)
            problems.append(
                Problem(
                    f"{at}.{self.origin_key}",
                    f"{shown(value)} " + ("carries credentials in the URL" if secret else "is not a URL"),
                    f"use the {what} as crosstrain made it (https://<host>, no credentials in it)",
                )
            )
        return problems

    def _origin_problems(
        self, place: Place, said: str | None, what: str, mine: Configured, env: Mapping[str, str]
    ) -> list[Problem]:
        origin = origin_of(place.url)
        if said is not None and origin != said:
            return [
                Problem(
                    place.at,
                    f"{shown(place.url)} is not on the {what}'s {self.origin_noun} {said}",
                    f"render the {what} again instead of editing its URLs",
                )
            ]
        if origin is not None and (
            (self.origins is not None and self.origins.fullmatch(origin)) or origin == mine.origin
        ):
            return []
        where = origin or shown(place.url if place.value is None else place.value)
        fix = f"use a {what} made by crosstrain for {self.made_for}"
        if self.origin_key is None:
            text = f"the {what} sends to {where}, which is not {self.service}; {self.nowhere_else}"
        elif mine.origin is None and self.service is None:
            text = f"the {what} is for {where}, and this machine configures no {self.origin_noun} ({mine.source})"
        else:
            allowed = [self.service] if self.service else []
            allowed += [f"the configured {self.origin_noun} {mine.origin} ({mine.source})"] if mine.origin else []
            text = f"the {what} sends to {where}, which is not {' nor '.join(allowed)}; {self.nowhere_else}"
        if self.origin_key is not None and origin is not None:
            fix = (
                f"if {origin} is your {self.origin_noun}, set {env[self.origin_key]}={origin} (or pass --set "
                f"{self.origin_key}={origin}{self.configure_also}); else {fix}"
            )
        return [Problem(place.at, text, fix)]

    def _path_problems(
        self, place: Place, stated: Mapping[str, Any], what: str, configured: Mapping[str, Any], env: Mapping[str, str]
    ) -> list[Problem]:
        if self.path is None or (place.url is None and place.path is None):
            return []
        path = place.path if place.path is not None else urlsplit(place.url).path
        at = place.path_at or place.at
        found = self.path.fullmatch(path) if isinstance(path, str) else None
        if found is None or any(part in (".", "..") for part in unquote(path).split("/")):
            return [Problem(at, f"{shown(path)} is not {self.url_form}", f"use a {what} made by crosstrain")]
        problems = []
        for key in self.keys:
            value = unquote(found[key])
            said = stated.get(key)
            if said is not None and self._differs(value, said):
                problems.append(
                    Problem(
                        at,
                        f"{shown(place.url or path)} is outside the {self.scope} the {what} names ({key} {said!r})",
                        f"use a {what} made by crosstrain",
                    )
                )
            elif said is None and self._differs(value, configured.get(key)):
                problems.append(self._elsewhere(at, key, value, configured[key], what, env))
        return problems

    def _differs(self, value: str, other: Any) -> bool:
        """Whether `value` names another thing than `other` (None, or a number where numbers stand for names,
        cannot be compared)."""
        if other is None or (self.numbered and (value.isdigit() or str(other).isdigit())):
            return False
        return value.lower() != str(other).lower() if self.fold_case else value != other

    def _elsewhere(self, at: str, key: str, value: str, mine: Any, what: str, env: Mapping[str, str]) -> Problem:
        return Problem(
            at,
            f"the {what} is for {key} {value!r}, this machine is configured for {mine!r}",
            f"pass --set {key}={value} (or set {env[key]}) if that {self.scope} is meant",
        )
