"""scripts/test runs every stage in one pytest session: tests/conftest.py orders them."""

import importlib.util
import os

import pytest

from ansible_collections.gpufleet.sglang.tests.paths import ROOT

_SPEC = importlib.util.spec_from_file_location(
    "gpufleet_tests_conftest", os.path.join(os.path.dirname(os.path.dirname(__file__)), "conftest.py"))
conftest = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(conftest)


class _CallSpec:
    def __init__(self, name):
        self.params = {"scenario": name}


class _Item:
    def __init__(self, nodeid, scenario=None):
        self.nodeid = nodeid
        self.name = nodeid.split("::")[-1]
        self.originalname = self.name.split("[")[0]
        self.marks = []
        if scenario:
            self.callspec = _CallSpec(scenario)

    def add_marker(self, mark):
        self.marks.append(mark)


def _items():
    mol = "tests/stages/test_molecule.py::test_scenario[extensions-%s]"
    return [_Item("tests/integration/test_bad_input.py::test_x"),
            _Item(mol % "router", "router"),
            _Item(mol % "tune", "tune"),
            _Item(mol % "model", "model"),
            _Item("tests/integration/test_fleet_modules.py::test_y"),
            _Item(mol % "deploy", "deploy"),
            _Item("tests/stages/test_checks.py::test_ansible_test_sanity"),
            _Item(mol % "multinode", "multinode"),
            _Item(mol % "safety", "safety"),
            _Item("tests/stages/test_checks.py::test_ansible_lint"),
            _Item("tests/unit/test_a.py::test_a"),
            _Item(mol % "zzz-new", "zzz-new"),
            _Item("tests/integration/test_minimal_inventory.py::test_m")]


def test_stages_run_in_order_and_new_scenarios_after_the_known_ones():
    items = _items()
    conftest.order_stages(items)
    assert [conftest._stage_of(i)[1] for i in items] == [  # pylint: disable=protected-access
        "unit", "ansible-lint", "sanity", "molecule-tune", "molecule-deploy", "fleet-modules",
        "molecule-safety", "molecule-multinode", "molecule-model", "molecule-router",
        "molecule-zzz-new", "bad-input", "tests/integration/test_minimal_inventory.py"]
    assert not any(i.marks for i in items)


def test_two_workers_run_lane_1_from_the_start_and_lane_2_around_the_rest():
    items = _items()
    conftest.order_stages(items)
    conftest.into_lanes(items)
    stages = [conftest._stage_of(i)[1] for i in items]  # pylint: disable=protected-access
    assert stages == [
        "molecule-tune", "molecule-router", "bad-input",
        "tests/integration/test_minimal_inventory.py", "unit", "ansible-lint", "sanity",
        "molecule-deploy", "fleet-modules", "molecule-safety", "molecule-multinode", "molecule-model",
        "molecule-zzz-new"]
    groups = [[m.kwargs.get("name", m.args[0] if m.args else None) for m in i.marks] for i in items]
    assert groups == [["lane-1"]] * 3 + [["lane-2-first"]] + [[]] * 3 + [["lane-2"]] * 6


@pytest.mark.filterwarnings("ignore::pytest.PytestUnknownMarkWarning")  # "integration", registered for those runs
def test_every_molecule_scenario_is_found():
    spec = importlib.util.spec_from_file_location(
        "gpufleet_test_molecule", os.path.join(os.path.dirname(os.path.dirname(__file__)), "stages",
                                               "test_molecule.py"))
    stage = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stage)
    on_disk = sorted(d for d in os.listdir(os.path.join(ROOT, "extensions", "molecule"))
                     if os.path.isfile(os.path.join(ROOT, "extensions", "molecule", d, "molecule.yml")))
    assert stage.scenarios() == on_disk and "deploy" in on_disk
