"""docs/CONVENTIONS.md's "Stage → file" map names every file of plugins/module_utils/,
plugins/modules/, plugins/action/ and plugins/filter/ (module_utils files by their path
below plugins/module_utils/, the others by ``<dir>/<name>.py``)."""

import os
import re

from ansible_collections.gpufleet.sglang.tests.paths import ROOT

PLUGINS = os.path.join(ROOT, "plugins")
MAPPED_DIRS = ("module_utils", "modules", "action", "filter")


def stage_map(text):
    """The backticked names of the "Stage → file" section of ``text``."""
    section = text.split("## Stage → file", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`([^`]+)`", section))


def plugin_files(plugins=PLUGINS):
    """``<dir>/<rest>`` of every Python file of the mapped directories (package markers
    left out)."""
    out = []
    for top in MAPPED_DIRS:
        for base, dirs, names in os.walk(os.path.join(plugins, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in names:
                if name.endswith(".py") and name != "__init__.py":
                    out.append(os.path.relpath(os.path.join(base, name), plugins).replace(os.sep, "/"))
    return sorted(out)


def unnamed(files, named):
    """The files the map does not name: a module_utils file by its path below module_utils,
    any other file by ``<dir>/<name>.py``."""
    missing = []
    for path in files:
        top, rest = path.split("/", 1)
        wanted = rest if top == "module_utils" else path
        if wanted not in named:
            missing.append(path)
    return missing


def _read_map():
    with open(os.path.join(ROOT, "docs", "CONVENTIONS.md"), encoding="utf-8") as handle:
        return stage_map(handle.read())


def test_every_plugin_file_is_in_the_stage_map():
    files = plugin_files()
    assert "module_utils/prepare/_capacity.py" in files and "modules/server_unit.py" in files
    assert unnamed(files, _read_map()) == []


def test_a_file_the_map_does_not_name_is_reported():
    named = _read_map()
    # the control: made-up files, one per kind of place
    made_up = ["module_utils/prepare/_made_up.py", "modules/made_up.py", "action/made_up.py",
               "filter/made_up.py"]
    assert unnamed(plugin_files() + made_up, named) == made_up
    # a module_utils file named without its stage's subpackage is not named
    assert unnamed(["module_utils/prepare/_capacity.py"], {"_capacity.py"}) == \
        ["module_utils/prepare/_capacity.py"]
