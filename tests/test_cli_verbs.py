"""The CLI's own process: pydantic's plugin discovery stood in for, and nothing of pydantic lost by it."""

from __future__ import annotations

import json

from tests.conftest import printed_by

PROBE = """
import json, sys
from crosstrain import cli_verbs
cli_verbs.without_pydantic_plugins()
from crosstrain.loader import job_from_dict
job = job_from_dict({"name": "probe", "image": "python:3.11", "command": ["python", "-c", "0"]})
seen = {"job": job.name, "metadata_loaded": "importlib.metadata" in sys.modules}
loader = sys.modules["pydantic.plugin._loader"]
seen["plugins"] = list(loader.get_plugins())
seen["group"] = loader.PYDANTIC_ENTRY_POINT_GROUP  # a name only the real loader has
real = sys.modules["pydantic.plugin._loader"]
seen["real_plugins"] = real._plugins
print(json.dumps(seen))
"""


def test_the_cli_validates_without_reading_any_distribution_metadata() -> None:
    """The stand-in finds no plugins, so a model validates with no `importlib.metadata` import (15 ms of a
    cold render); a name pydantic asks that the stand-in lacks comes from the real loader, which is then told
    that there are no plugins."""
    seen = json.loads(" ".join(printed_by(PROBE)))
    assert seen == {"job": "probe", "metadata_loaded": False, "plugins": [], "group": "pydantic", "real_plugins": {}}


def test_where_pydantic_loaded_its_loader_already_it_is_told_there_are_no_plugins() -> None:
    probe = (
        "import sys, pydantic.plugin._loader as loader\n"
        "from crosstrain import cli_verbs\n"
        "cli_verbs.without_pydantic_plugins()\n"
        "print(sys.modules['pydantic.plugin._loader'] is loader, loader._plugins)\n"
    )
    assert printed_by(probe) == ["True", "{}"]


def test_a_program_that_imports_crosstrain_keeps_pydantic_s_plugin_loader() -> None:
    probe = (
        "import sys, crosstrain\n"
        "from crosstrain.loader import job_from_dict\n"
        "job_from_dict({'name': 'probe', 'image': 'python:3.11', 'command': ['python']})\n"
        "loader = sys.modules['pydantic.plugin._loader']\n"
        "print(hasattr(loader, 'PYDANTIC_ENTRY_POINT_GROUP'), loader._plugins is not None)\n"
    )
    assert printed_by(probe) == ["True", "True"]
