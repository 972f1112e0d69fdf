"""Make the repository importable as ``ansible_collections.gpufleet.sglang``.

The repository root *is* the collection. Python needs it under
``ansible_collections/gpufleet/sglang``; a symlink tree in ``.cache/`` provides that
without moving anything.
"""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TREE = os.path.join(ROOT, ".cache", "collections")
LINK = os.path.join(TREE, "ansible_collections", "gpufleet", "sglang")

if not os.path.islink(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    try:
        os.symlink(ROOT, LINK)
    except FileExistsError:
        pass
if TREE not in sys.path:
    sys.path.insert(0, TREE)

FIXTURES = os.path.join(ROOT, "tests", "fixtures")  # = tests/paths.py's FIXTURES


@pytest.fixture
def fixtures_dir():
    """The tests' fixtures directory (tests/fixtures); module-level code imports
    ``ansible_collections.gpufleet.sglang.tests.paths.FIXTURES`` instead."""
    return FIXTURES


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """pytest-ansible: find the collection in .cache/collections (the tree above), instead of
    making a ``collections/`` symlink tree in the checkout and also searching
    ~/.ansible/collections, where molecule installs older copies of this collection."""
    if hasattr(config.option, "ansible_unit_inject_only"):
        os.environ["ANSIBLE_COLLECTIONS_PATH"] = TREE
        config.option.ansible_unit_inject_only = True
    config.addinivalue_line("markers", "integration: needs the test bed's containers "
                            "(GPUFLEET_INTEGRATION=1)")


# --- one pytest run for every stage (scripts/test): order and per-stage timings -----------

# Molecule scenarios first in this order, then any other scenario by name. The tune
# scenario comes before them all: it starts lane 1 (below).
SCENARIO_ORDER = ("deploy", "safety", "multinode")
_CHECKS = {"test_ansible_lint": "ansible-lint", "test_argument_specs_in_lockstep_with_defaults":
           "argument-specs", "test_changelog_fragments": "changelog",
           "test_ansible_test_sanity": "sanity", "test_collection_docs_lint": "docs-lint",
           "test_markdown_lint": "markdown-lint", "test_docs_site": "docs-site"}
_stage_seconds = {}


def _stage_of(item):
    """(rank, stage name) of a test: the order scripts/test runs the stages in."""
    path = item.nodeid.split("::")[0]
    name = getattr(item, "originalname", item.name)
    if path.startswith("tests/unit/"):
        return (0, "unit")
    if path == "tests/stages/test_checks.py":
        stage = _CHECKS.get(name, name)
        return (2 if stage == "sanity" else 1, stage)
    if path == "tests/stages/test_molecule.py":
        scenario = item.callspec.params["scenario"] if hasattr(item, "callspec") else name
        if scenario == "tune":
            return (2.5, "molecule-tune")
        if scenario == "deploy":
            return (3, "molecule-deploy")
        if scenario in SCENARIO_ORDER:
            return (4 + SCENARIO_ORDER.index(scenario), "molecule-" + scenario)
        return (8, "molecule-" + scenario)
    if path == "tests/integration/test_fleet_modules.py":
        return (3.5, "fleet-modules")  # on the fleet the deploy scenario leaves up
    if path == "tests/integration/test_bad_input.py":
        return (9, "bad-input")
    return (10, path)


# Two lanes when scripts/test runs on two xdist workers (``-n 2 --dist loadgroup
# --no-loadscope-reorder``): the scenarios of LANE_1 start at once on one worker and run one
# after another; the other worker takes LANE_2_FIRST, then the unit tests and the static
# checks (CPU-bound, no fleet), then LANE_2's fleets, one after another. Each lane is an
# xdist group, so a lane's tests keep their order on one worker (the deploy fleet stays up
# for the module tests), and no two scenarios of a lane share the machine. Which stage
# goes where balances the lanes' measured times (below).
# Lane 1 starts with the tune scenario, lane 2 with one short fleet (LANE_2_FIRST) and then
# the unit tests and the static checks: the three trials the tune times alone and its
# parallel round then both run beside those steady checks, not one beside the checks and
# the other beside another fleet's converge (issue 21's parallelism bound compares the
# two). deploy, its module tests and safety share one fleet's names and ports, so they
# stay in one lane.
# Seconds in the two-lane run of 2026-12-02 on this kind of machine (2 cores; a lane's
# scenario shares the machine with the other lane; multinode then in lane 2, and the model
# scenario failed at its create: about 500 s when it passes): tune 869, router 1211,
# bad-input 178 = 2258 s; minimal 158, unit 248, lint 92, sanity 169, deploy 415,
# fleet-modules 32, safety 302, multinode 129, gate 112, model ~500, monitoring 212,
# bench-deploy 147 = about 2516 s. With multinode (its own names and ports) in lane 1:
# about 2390 s each.
# The full run of 2026-12-03 on this kind of machine (tune with its keep=original run,
# router with the kill points' new checks): lane 1 tune 961, multinode 130, router about
# 1,380, bad-input about 190 s; lane 2 ended about 5 min before lane 1, so multinode
# (its own names and ports) moves back to lane 2.
# The full run of 1e3a416 (2026-12-03; CI: 2,744 s): lane 1 tune 967 + router 1,565 +
# bad-input 189 = 2,721 s; lane 2 minimal 158, unit 282, lint 104, sanity 155, deploy 399,
# fleet-modules 42, safety 325, multinode 138, gate 116, model 426, monitoring 231,
# bench-deploy 169 = 2,545 s. bad-input (its own fleet) and gate change lanes: about 2,650 s
# and 2,620 s (gate's SSH and HTTP ports, 22551 and 39551, are no other fleet's: bench-deploy
# takes 22501-22502 in lane 2).
# The full run of 275109d (2026-12-07, this kind of machine, a clean clone; pytest 2,441 s):
# lane 1 tune 770 + gate 106 + router 1,164 = 2,040 s; lane 2 minimal 120, unit 342, the
# static and docs checks 227, sanity 128, deploy 284, fleet-modules 33, safety 245, multinode
# 113, model 364, monitoring 167, bad-input 157, bench-deploy 117, the demo's tune 261 =
# 2,430 s. bad-input (its own fleet, names and ports) moves to lane 1: about 2,200 and 2,270 s.
LANE_1 = ("molecule-tune", "molecule-gate", "molecule-router", "bad-input")
LANE_2_FIRST = ("tests/integration/test_minimal_inventory.py",)
LANE_2 = ("molecule-deploy", "fleet-modules", "molecule-safety", "molecule-multinode",
          "molecule-model", "molecule-monitoring", "molecule-real-release",
          "tests/integration/test_bench_deploy.py", "tests/integration/test_demo_tune.py")


def lane_of(stage):
    """The lane of a stage that brings up a fleet: "1" (LANE_1), "2-first" (LANE_2_FIRST)
    or "2" (LANE_2; a new scenario goes there); None for the rest (the unit tests and the
    static checks)."""
    if stage in LANE_1:
        return "1"
    if stage in LANE_2_FIRST:
        return "2-first"
    if stage in LANE_2 or stage.startswith("molecule-") or stage.startswith("tests/integration/"):
        return "2"
    return None


def _queue_rank(item):
    """Under xdist the work queue is the collection order: lane 1 first (one worker takes
    it at once), then the start of lane 2 (the other worker takes it at once), then the
    fleet-less stages (that worker takes them next; the first worker's queue is full), then
    the rest of lane 2."""
    lane = lane_of(_stage_of(item)[1])
    return {"1": 0, "2-first": 1, None: 2, "2": 3}[lane]


def order_stages(items):
    """Sort the items in place into the order of the stages (one process runs them so)."""
    order = {id(item): (_stage_of(item), i) for i, item in enumerate(items)}
    items.sort(key=lambda item: (order[id(item)][0][0],
                                 order[id(item)][0][1] if order[id(item)][0][0] == 8 else "",
                                 order[id(item)][1]))


def into_lanes(items):
    """Mark each fleet's item with its lane's xdist group and sort the items in place into
    the work queue: lane 1, the start of lane 2, the rest, lane 2 (each keeps the order of
    the stages)."""
    for item in items:
        lane = lane_of(_stage_of(item)[1])
        if lane:
            item.add_marker(pytest.mark.xdist_group("lane-%s" % lane))
    items.sort(key=_queue_rank)  # stable


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    order_stages(items)
    if getattr(config.option, "dist", "no") != "no" or os.environ.get("PYTEST_XDIST_WORKER"):
        into_lanes(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):  # pylint: disable=unused-argument
    report = yield
    report.gpufleet_stage = _stage_of(item)[1]
    return report


_stages_run = set()


def pytest_runtest_logreport(report):
    stage = getattr(report, "gpufleet_stage", None)
    if stage:
        _stage_seconds[stage] = _stage_seconds.get(stage, 0.0) + report.duration
        if report.when == "call":
            _stages_run.add(stage)


def pytest_terminal_summary(terminalreporter):
    if not _stages_run:
        return
    terminalreporter.section("timings per stage")
    for stage, seconds in _stage_seconds.items():
        if stage in _stages_run:  # not the stages whose tests were all skipped
            terminalreporter.write_line("%-18s %6d s" % (stage, round(seconds)))
