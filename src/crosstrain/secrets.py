"""Secrets stay references: how a render carries `env: {NAME: {secret: REF}}` to where the value is read.

crosstrain never reads a secret's value to render or submit a job: the request holds the reference, and the
value is read on the node, by the platform where it resolves references itself (Databricks classic clusters:
`{{secrets/scope/key}}` in `spark_env_vars`), else by crosstrain's runtime at start
(`python -m crosstrain.runtime.secrets -- COMMAND` reads each `CROSSTRAIN_SECRET_<NAME>` reference with the
job's own identity, sets `NAME`, and runs the command). A target declares the stores it resolves in
`Capabilities.secret_stores`; a reference to any other store is refused with its field path and a fix, never
dropped. Standard library only: this module is on the render path.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from crosstrain.errors import Problem

if TYPE_CHECKING:
    from crosstrain.spec import PoolView, TrainingJob
    from crosstrain.spec_fields import SecretRef

#: The stores a secret reference can name, as `SecretRef.store` spells them.
SECRET_STORES = ("databricks", "gcp", "azure")
SECRET_FORMS = {
    "databricks": re.compile(r"(?P<scope>[A-Za-z0-9_.@-]{1,128})/(?P<key>[A-Za-z0-9_.-]{1,128})"),
    "gcp": re.compile(
        r"projects/(?P<project>[a-z0-9][a-z0-9-]{0,62})/secrets/(?P<secret>[A-Za-z0-9_-]{1,255})"
        r"(?:/versions/(?P<version>latest|[1-9][0-9]{0,18}))?"
    ),
    "azure": re.compile(
        r"https://(?P<vault>[A-Za-z][A-Za-z0-9-]{1,22}[A-Za-z0-9])\.(?P<suffix>vault\.azure\.net|vault\.azure\.cn|"
        r"vault\.usgovcloudapi\.net)/secrets/(?P<name>[A-Za-z0-9-]{1,127})(?:/(?P<version>[0-9a-f]{32}))?/?"
    ),
}
#: One reference per store, in `SECRET_FORMS` (for messages and the backends' shared test suite).
EXAMPLE_REFERENCES = {
    "databricks": "ml-scope/hf-token",
    "gcp": "projects/my-proj/secrets/hf-token",
    "azure": "https://my-vault.vault.azure.net/secrets/hf-token",
}
SECRET_FORMS_TEXT = (
    "a Databricks secret `scope/key`, a Secret Manager secret `projects/<project>/secrets/<name>[/versions/<n>]`, "
    "or a Key Vault secret `https://<vault>.vault.azure.net/secrets/<name>[/<version>]`"
)


def match_reference(reference: str) -> tuple[str, dict[str, str]] | None:
    """The store a reference names and its parts (`scope`, `key`; `project`, `secret`, `version`; `vault`,
    `suffix`, `name`, `version`), or None where it is none of `SECRET_FORMS`."""
    for store, form in SECRET_FORMS.items():
        match = form.fullmatch(reference)
        if match:
            return store, {k: v for k, v in match.groupdict().items() if v is not None}
    return None


def schema_pattern() -> str:
    """The reference forms as one JSON Schema (ECMA-262) pattern: no named groups."""
    forms = "|".join(re.sub(r"\(\?P<\w+>", "(", form.pattern) for form in SECRET_FORMS.values())
    return f"^(?:{forms})$"


#: The variable that carries the reference of the secret meant for NAME, for the runtime resolver.
REFERENCE_PREFIX = "CROSSTRAIN_SECRET_"
#: The module that resolves references on the node and then runs the training command.
RESOLVER_MODULE = "crosstrain.runtime.secrets"
#: What each store is called in messages.
STORE_TITLES = {
    "databricks": "Databricks secret scope",
    "gcp": "Google Secret Manager",
    "azure": "Azure Key Vault",
}
#: The pip extra the image needs for the runtime resolver of each store.
RUNTIME_EXTRA = "crosstrain[secrets]"


def refusals(job: TrainingJob, stores: frozenset[str], target: str) -> list[Problem]:
    """Every secret reference of `job` that `target` cannot resolve, once per field."""
    found: dict[str, Problem] = {}
    for pool in job.pools():
        for name in pool.env:
            if name.startswith(REFERENCE_PREFIX):
                path = f"env.{name}" if name in job.env else f"{pool.role}.env.{name}"
                found.setdefault(
                    path,
                    Problem(
                        path,
                        f"variables named {REFERENCE_PREFIX}* carry secret references for crosstrain's runtime",
                        f"rename it, or write `{name[len(REFERENCE_PREFIX) :]}: {{secret: REF}}`",
                    ),
                )
        for _name, (ref, path) in pool.secrets.items():
            if ref.store in stores or path in found:
                continue
            if stores:
                names = " or ".join(STORE_TITLES[s] for s in sorted(stores))
                fix = f"name a secret in {names}, or choose a target that reads {STORE_TITLES[ref.store]}"
            else:
                fix = "remove the reference (this target resolves no secrets), or choose a target that does"
            found[path] = Problem(
                path,
                f"{target} cannot resolve a {STORE_TITLES[ref.store]} secret ({ref.secret}) on its nodes",
                fix,
            )
    return list(found.values())


def needs_command(job: TrainingJob, target: str) -> list[Problem]:
    """Where the runtime resolves the references, it must run before the command: a pool with secrets and no
    command (the image's entrypoint) cannot have them."""
    problems = []
    for pool in job.pools():
        if pool.secrets and not pool.command:
            path = next(iter(pool.secrets.values()))[1]
            problems.append(
                Problem(
                    path,
                    f"on {target}, crosstrain's runtime reads the secret at start and then runs the command, but "
                    f"{pool.role} leaves the command to the image's entrypoint",
                    "set `command` (the image needs crosstrain installed), or pass the secret another way",
                )
            )
    return problems


def reference_env(pool: PoolView) -> dict[str, str]:
    """`CROSSTRAIN_SECRET_<NAME>: <reference>` for each secret of `pool`, sorted: what the runtime resolver reads."""
    return {f"{REFERENCE_PREFIX}{name}": ref.secret for name, (ref, _) in sorted(pool.secrets.items())}


def resolver_command(command: list[str]) -> list[str]:
    """`command`, run by the resolver once it has set each secret's variable."""
    return ["python", "-m", RESOLVER_MODULE, "--", *command]


def runtime_note(pool: PoolView) -> str:
    """What a job whose secrets the runtime reads needs on the node."""
    stores = sorted({ref.store for ref, _ in pool.secrets.values()})
    access = {
        "gcp": "the job's service account needs roles/secretmanager.secretAccessor on each secret",
        "azure": "the compute's managed identity (AZURE_CLIENT_ID picks a user-assigned one) needs get on the "
        "vault's secrets",
    }
    needs = "; ".join(access[s] for s in stores if s in access)
    return (
        f"{', '.join(sorted(pool.secrets))}: read from {' and '.join(STORE_TITLES[s] for s in stores)} at start by "
        f"`python -m {RESOLVER_MODULE}` (the image needs {RUNTIME_EXTRA}); {needs}"
    )


def databricks_placeholder(ref: SecretRef) -> str:
    """`{{secrets/<scope>/<key>}}`, which a Databricks classic cluster resolves in `spark_env_vars` at start."""
    return "{{secrets/" + ref.secret + "}}"
