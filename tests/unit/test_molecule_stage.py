"""tests/stages/test_molecule.py: what a failed scenario shows at the end of its output."""

import importlib.util
import os
import sys

from ansible_collections.gpufleet.sglang.tests.paths import ROOT

_SPEC = importlib.util.spec_from_file_location(
    "gpufleet_test_molecule", os.path.join(ROOT, "tests", "stages", "test_molecule.py"))
stage = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(stage)

LOG = """PLAY [A shard truncated] *******************************************************

TASK [Read what the repair did] ************************************************
ok: [gpufleet-model-2]

TASK [Host 2 saw the truncation and received only the missing part from a peer] ***
ok: [gpufleet-model-1] => {"changed": false, "msg": "All assertions passed"}
fatal: [gpufleet-model-2]: FAILED! => {
    "assertion": "__f.bytes_redundant < 10",
    "msg": "fetch {'bytes_redundant': 2162688}"
}

TASK [Deploy] ******************************************************************
changed: [localhost]
failed: [localhost] (item=x) => {"msg": "%s"}

PLAY RECAP *********************************************************************
""" % ("x" * 5000)


def test_each_failed_task_is_named_with_its_message():
    found = stage.failed_tasks(LOG.splitlines(), width=300)
    assert len(found) == 2
    # the task's name, then its result over the lines the callback wrote, up to the blank line
    assert found[0] == ("TASK [Host 2 saw the truncation and received only the missing part "
                        "from a peer]\nfatal: [gpufleet-model-2]: FAILED! => {\n"
                        "    \"assertion\": \"__f.bytes_redundant < 10\",\n"
                        "    \"msg\": \"fetch {'bytes_redundant': 2162688}\"\n}")
    assert found[1].startswith("TASK [Deploy]\nfailed: [localhost] (item=x)")
    assert len(found[1].split("\n", 1)[1]) == 300  # the result cut to the width


def test_a_log_without_a_failed_task_gives_none():
    assert stage.failed_tasks(["TASK [x] ***", "ok: [h]", "fatal_error: not a task line"]) == []


def _molecule_config(path, base):
    """The configuration molecule itself makes of the scenario file ``path`` over the base
    configs ``base`` (molecule's own loader and merge)."""
    from molecule import config  # pylint: disable=import-outside-toplevel

    return config.Config(path, args={"base_config": base}, command_args={}).config_data


def test_every_scenario_gets_the_shared_base_config(monkeypatch):
    """extensions/molecule/config.yml is the base molecule finds for this collection, and
    each scenario's molecule.yml over it gives what every scenario needs: the checkout's
    collection, no prerun, the test bed's playbooks that exist, its own inventory. The
    control: a scenario file without the base has none of it."""
    from molecule import util  # pylint: disable=import-outside-toplevel

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("MOLECULE_PROJECT_DIRECTORY", ROOT)
    # molecule asks ansible-config of the venv it runs in
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    base = os.path.join(ROOT, "extensions", "molecule", "config.yml")
    assert os.path.realpath(util.lookup_config_file(".config/molecule/config.yml")) == os.path.realpath(base)
    scenarios = stage.scenarios()
    assert len(scenarios) >= 9, scenarios
    for name in scenarios:
        path = os.path.join(stage.MOLECULE, name, "molecule.yml")
        data = _molecule_config(path, [base])
        assert data["prerun"] is False, name
        assert data["ansible"]["env"]["ANSIBLE_COLLECTIONS_PATH"] == ROOT + "/.cache/collections", name
        for step, playbook in data["ansible"]["playbooks"].items():
            if step in ("create", "prepare", "converge", "verify", "destroy"):
                assert os.path.exists(os.path.join(stage.MOLECULE, name, playbook)), (name, step, playbook)
        inventory = data["ansible"]["executor"]["args"]["ansible_playbook"]
        assert [os.path.isdir(arg.split("=", 1)[1]) for arg in inventory] == [True], (name, inventory)
        assert data["scenario"]["test_sequence"][0] == "destroy" and data["scenario"]["test_sequence"][-1] == "destroy"
        # the control: the scenario's own file alone
        alone = _molecule_config(path, [])
        assert alone.get("prerun") is not False or "ANSIBLE_COLLECTIONS_PATH" not in (alone.get("ansible") or {}).get("env", {}), name
