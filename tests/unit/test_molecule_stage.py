"""tests/stages/test_molecule.py: what a failed scenario shows at the end of its output; the
scenarios' base config; their inventories' one copy of the common group vars."""

import glob
import importlib.util
import os
import shutil
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


COMMON = os.path.join(stage.MOLECULE, "common", "group_vars")
#: the links a group's vars directory may hold, each to its one common file
LINKS = {"00-connection.yml": "connection.yml", "10-emulated-server.yml": "emulated_server.yml"}
#: the shared inventory's own server vars, which multinode and the bad-input host link whole
SHARED_MAIN = os.path.join(stage.MOLECULE, "inventory", "group_vars", "sglang_servers", "main.yml")
#: scenarios whose servers run the real package: no emulated-server defaults
REAL = {"real-release"}


def _inventories():
    """Every inventory of the test bed that loads the common group vars: each scenario's,
    the shared one (deploy, safety) and the bad-input host's."""
    found = sorted(glob.glob(os.path.join(stage.MOLECULE, "*", "inventory")))
    found.append(os.path.join(stage.MOLECULE, "inventory"))
    found.append(os.path.join(ROOT, "tests", "integration", "bad_input_inventory"))
    return found


def _yaml(path):
    import yaml  # pylint: disable=import-outside-toplevel

    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def _host_vars(inventory):
    """Each host's variables as Ansible merges them from ``inventory`` (untemplated)."""
    # pylint: disable=import-outside-toplevel
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    hosts = InventoryManager(loader=loader, sources=[inventory.rstrip("/") + "/"])
    manager = VariableManager(loader=loader, inventory=hosts)
    return dict((host.name, (set(group.name for group in host.get_groups()),
                             manager.get_vars(host=host, include_hostvars=False, stage="all")))
                for host in hosts.get_hosts())


def test_every_inventory_links_one_copy_of_the_common_group_vars():
    """Issue 47: the test bed's connection and the emulated server's defaults are written
    once (extensions/molecule/common/group_vars) and linked, relative file links inside the
    repository, into each inventory's group vars directories; no inventory writes them again."""
    connection = _yaml(os.path.join(COMMON, "connection.yml"))
    emulated = _yaml(os.path.join(COMMON, "emulated_server.yml"))
    assert connection and emulated
    inventories = _inventories()
    assert len(inventories) >= 9, inventories
    for inventory in inventories:
        links = set()
        for dirpath, _dirs, files in os.walk(os.path.join(inventory, "group_vars")):
            for name in files:
                path = os.path.join(dirpath, name)
                if os.path.islink(path):
                    target = os.path.realpath(path)
                    assert not os.path.isabs(os.readlink(path)), path
                    assert os.path.isfile(target) and not os.path.islink(target), path
                    if name in LINKS:
                        assert target == os.path.realpath(os.path.join(COMMON, LINKS[name])), path
                        links.add(name)
                    else:
                        assert target == os.path.realpath(SHARED_MAIN), path
                else:
                    own = _yaml(path)
                    assert not set(own) & (set(connection) | {"venv_packages", "venv_wheels"}), path
        assert "00-connection.yml" in links, inventory
        real = os.path.basename(os.path.dirname(inventory)) in REAL
        assert ("10-emulated-server.yml" in links) is not real, inventory


def test_every_host_gets_the_common_group_vars_and_only_servers_the_emulated_ones():
    """What Ansible makes of the links: every host of every inventory has the connection;
    each emulated server has every emulated-server default (its scenario may override a
    value in a later file); a real-release server has no emulator wheel; a router or
    monitoring host has none of them."""
    connection = _yaml(os.path.join(COMMON, "connection.yml"))
    emulated = _yaml(os.path.join(COMMON, "emulated_server.yml"))
    for inventory in _inventories():
        real = os.path.basename(os.path.dirname(inventory)) in REAL
        hosts = _host_vars(inventory)
        assert hosts, inventory
        for host, (groups, hostvars) in hosts.items():
            for key, value in connection.items():
                assert hostvars.get(key) == value, (inventory, host, key)
            if "sglang_servers" in groups and not real:
                assert set(emulated) <= set(hostvars), (inventory, host, sorted(set(emulated) - set(hostvars)))
                assert hostvars["venv_wheels"] == emulated["venv_wheels"], (inventory, host)
            elif "sglang_servers" in groups:  # the real package: the venv role's defaults
                assert not {"venv_packages", "venv_wheels"} & set(hostvars), (inventory, host)
            else:
                assert not set(emulated) & set(hostvars), (inventory, host, sorted(set(emulated) & set(hostvars)))


def test_the_common_group_vars_come_from_the_links(tmp_path):
    """The control: a copy of the gate's inventory (links copied as files) has the common
    vars; the same copy without the two links has its own vars but none of the common ones."""
    gate = os.path.join(stage.MOLECULE, "gate", "inventory")
    connection = _yaml(os.path.join(COMMON, "connection.yml"))
    emulated = _yaml(os.path.join(COMMON, "emulated_server.yml"))
    full, bare = str(tmp_path / "full"), str(tmp_path / "bare")
    shutil.copytree(gate, full)  # follows the links: their files' contents
    shutil.copytree(gate, bare)
    for name in LINKS:
        os.unlink(os.path.join(bare, "group_vars", "sglang_servers", name))
    (_groups, with_links), = _host_vars(full).values()
    (_groups, without), = _host_vars(bare).values()
    assert set(connection) | set(emulated) <= set(with_links)
    assert not (set(connection) | set(emulated)) & set(without), sorted(without)
    assert str(without["sglang_release"]) == str(with_links["sglang_release"]) == "0.5.9"
    assert without["server_environment"] == with_links["server_environment"]
