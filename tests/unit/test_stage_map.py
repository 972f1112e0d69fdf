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


# --- no stage imports a later one ----------------------------------------------------------

MODULE_UTILS = "ansible_collections.gpufleet.sglang.plugins.module_utils"


def stage_order(text):
    """The stages in their order, as the "Stage → file" section lists the subpackages of
    plugins/module_utils/ ("one subpackage per stage (`common/`, `check/`, ...)")."""
    section = text.split("## Stage → file", 1)[1]
    listing = re.search(r"one subpackage per stage \(([^)]*)\)", section, re.S).group(1)
    return re.findall(r"`(\w+)/`", listing)


def imported_stages(source):
    """(line, stage) of every import of a module_utils stage in ``source``, those inside
    functions included."""
    import ast
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module + "." + alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith(MODULE_UTILS + "."):
                found.append((node.lineno, name[len(MODULE_UTILS) + 1:].split(".")[0]))
    return sorted(set(found))


def upward_imports(files, order):
    """``<stage>/<file>:<line> imports <later stage>`` for each import of a later stage
    (``files`` maps a path below module_utils to its source)."""
    out = []
    for path, source in sorted(files.items()):
        own = path.split("/", 1)[0]
        if own not in order:
            continue
        for line, stage in imported_stages(source):
            if stage in order and order.index(stage) > order.index(own):
                out.append("%s:%d imports %s" % (path, line, stage))
    return out


def _module_utils_sources():
    files = {}
    for path in plugin_files():
        if path.startswith("module_utils/"):
            with open(os.path.join(PLUGINS, path), encoding="utf-8") as handle:
                files[path.split("/", 1)[1]] = handle.read()
    return files


def _read_order():
    with open(os.path.join(ROOT, "docs", "CONVENTIONS.md"), encoding="utf-8") as handle:
        return stage_order(handle.read())


def test_the_stage_order_is_the_one_conventions_lists():
    assert _read_order() == ["common", "check", "prepare", "rollout", "status", "weights",
                             "router", "bench", "tune", "monitoring"]


def test_no_stage_imports_a_later_stage():
    files = _module_utils_sources()
    assert "prepare/_preflight.py" in files and "weights/_model.py" in files
    assert upward_imports(files, _read_order()) == []


def test_an_upward_import_is_reported():
    order = _read_order()
    upward = ("from ansible_collections.gpufleet.sglang.plugins.module_utils.weights._model "
              "import quick_check\n")
    inside = ("def plan():\n"
              "    from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import plan\n"
              "    return plan\n")
    plain = "import ansible_collections.gpufleet.sglang.plugins.module_utils.router._router\n"
    downward = "from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _preflight\n"
    # the control: synthetic files with an import of a later stage, at the top, inside a
    # function, or as a plain import; an import of an earlier stage is no finding
    files = {"prepare/_made_up.py": upward, "check/_made_up.py": inside,
             "status/_made_up.py": plain, "weights/_made_up.py": downward}
    assert upward_imports(files, order) == ["check/_made_up.py:2 imports tune",
                                            "prepare/_made_up.py:1 imports weights",
                                            "status/_made_up.py:1 imports router"]
    # and over the real tree with one of them added, the check fails
    real = _module_utils_sources()
    real["prepare/_made_up.py"] = upward
    assert upward_imports(real, order) == ["prepare/_made_up.py:1 imports weights"]


UNIT_MODULE_UTILS = os.path.join(ROOT, "tests", "unit", "plugins", "module_utils")


def misplaced_tests(paths, stages):
    """The test files of ``paths`` (relative to tests/unit/plugins/module_utils) that are not
    in the folder of a stage of ``stages``: the unit tests mirror plugins/module_utils."""
    out = []
    for path in sorted(paths):
        parts = path.split("/")
        if parts[-1].endswith(".py") and (len(parts) != 2 or parts[0] not in stages):
            out.append(path)
    return out


def _unit_module_utils_files():
    found = []
    for dirpath, dirnames, filenames in os.walk(UNIT_MODULE_UTILS):
        dirnames[:] = [d for d in dirnames if d not in ("data", "__pycache__")]
        for name in filenames:
            found.append(os.path.relpath(os.path.join(dirpath, name), UNIT_MODULE_UTILS).replace(os.sep, "/"))
    return found


def test_the_module_utils_tests_mirror_the_stages():
    stages = _read_order()
    files = _unit_module_utils_files()
    assert "router/test_router.py" in files and "tune/test_search_bound.py" in files
    assert misplaced_tests(files, stages) == []
    # the control: a flat test file, one in a folder that is no stage, one too deep
    assert misplaced_tests(["test_router.py", "misc/test_x.py", "router/deep/test_y.py",
                            "router/test_router.py"], stages) == [
        "misc/test_x.py", "router/deep/test_y.py", "test_router.py"]
