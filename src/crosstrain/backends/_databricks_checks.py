"""What both Databricks targets read before a submit (`crosstrain check`): the token against the workspace, and
the folder or volume the code goes to. Read-only: `current_user.me`, `workspace.get_status` and
`files.get_directory_metadata`, never a create call. Each platform package adds its own reads (node types, pools
and policies; AI Runtime's capacity)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from crosstrain.preflight import Check, Outcome, classify

if TYPE_CHECKING:
    from databricks.sdk import WorkspaceClient

T = TypeVar("T")

#: Error classes of databricks-sdk (by name: the package imports no SDK outside the adaptors) -> outcome.
_BY_CLASS = {
    "PermissionDenied": Outcome.PERMISSION,
    "Unauthenticated": Outcome.PERMISSION,
    "NotFound": Outcome.NOT_FOUND,
    "ResourceDoesNotExist": Outcome.NOT_FOUND,
    "FeatureDisabled": Outcome.UNCHECKED,
    "NotImplemented": Outcome.UNCHECKED,
}


def outcome_of(error: BaseException) -> Outcome:
    """What a databricks-sdk error means for a check: by its class, its error code, then its words."""
    if getattr(error, "error_code", None) in ("FEATURE_DISABLED", "ENDPOINT_NOT_FOUND"):
        return Outcome.UNCHECKED
    for cls in type(error).__mro__:
        if cls.__name__ in _BY_CLASS:
            return _BY_CLASS[cls.__name__]
    return classify(None, str(error))


def read(name: str, call: Callable[[], T], fixes: dict[Outcome, str]) -> T | Check:
    """The call's answer, or a check saying why it failed (with the fix for that outcome)."""
    try:
        return call()
    except Exception as error:  # any failure of a read is a check's outcome, not a crash
        outcome = outcome_of(error)
        text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return Check(name, outcome, text[:300], fixes.get(outcome, "retry, or check the workspace's status page"))


def client_or_check(make: Callable[[], WorkspaceClient], host: str) -> WorkspaceClient | Check:
    """The workspace's client, or the check saying why none can be made (no credentials for the host)."""
    found: WorkspaceClient | Check = read(
        "credentials",
        make,
        {Outcome.PERMISSION: f"set DATABRICKS_TOKEN (or a ~/.databrickscfg profile) for {host}"},
    )
    if isinstance(found, Check) and found.outcome is Outcome.UNREACHABLE and "credentials" in found.message:
        return Check(
            "credentials",
            Outcome.PERMISSION,
            found.message,
            f"set DATABRICKS_TOKEN (or a ~/.databrickscfg profile) for {host}",
        )
    return found


def workspace_checks(client: WorkspaceClient, host: str, workspace_dir: str, volume: str | None) -> list[Check]:
    """The token (whose user it is) and the folder or volume the code goes to."""
    me = read(
        "credentials",
        client.current_user.me,
        {
            Outcome.PERMISSION: f"give a valid token for {host}: DATABRICKS_TOKEN, or a ~/.databrickscfg profile",
            Outcome.UNREACHABLE: f"check the host ({host}) and your network",
        },
    )
    if isinstance(me, Check):
        return [me]
    checks = [Check("credentials", Outcome.OK, f"{host} accepts the token of {me.user_name or 'this user'}")]
    if volume:
        found: Any = read(
            "staging",
            lambda: client.files.get_directory_metadata(volume),
            {
                Outcome.NOT_FOUND: f"create the volume folder {volume}, or set `volume` to one that exists",
                Outcome.PERMISSION: f"ask for WRITE VOLUME on {volume}, or set `volume` to one you can write",
            },
        )
        checks.append(found if isinstance(found, Check) else Check("staging", Outcome.OK, f"volume {volume} exists"))
        return checks
    status: Any = read(
        "staging",
        lambda: client.workspace.get_status(workspace_dir),
        {Outcome.PERMISSION: f"ask for CAN MANAGE on {workspace_dir}, or set `workspace_dir` to a folder you own"},
    )
    if isinstance(status, Check) and status.outcome is Outcome.NOT_FOUND:
        checks.append(Check("staging", Outcome.OK, f"{workspace_dir} does not exist yet: submit makes it"))
    elif isinstance(status, Check):
        checks.append(status)
    elif str(getattr(status.object_type, "value", status.object_type)) != "DIRECTORY":
        checks.append(
            Check(
                "staging",
                Outcome.NOT_FOUND,
                f"{workspace_dir} is a {status.object_type}, not a folder",
                "set `workspace_dir` to a folder",
            )
        )
    else:
        checks.append(
            Check("staging", Outcome.OK, f"folder {workspace_dir} exists (writing is not tried: no create call)")
        )
    return checks
