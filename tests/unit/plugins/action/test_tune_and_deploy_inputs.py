# -*- coding: utf-8 -*-
"""playbooks/tune.yml and playbooks/deploy.yml refuse bad inputs in their FIRST task, on
localhost, before any host is touched (issue 42): the tune's inputs all at once, a
tune_hosts that names no host, an empty server group. The hosts of the inventory are
unreachable on purpose: a run that got past the first task would fail differently."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
BIN = os.path.dirname(sys.executable)

INVENTORY = """
all:
  children:
    sglang_servers:
      hosts:
        gpu-1: {ansible_host: 192.0.2.1, ansible_connection: ssh}
        gpu-2: {ansible_host: 192.0.2.2, ansible_connection: ssh}
"""
EMPTY = """
all:
  children:
    sglang_servers:
      hosts: {}
    other:
      hosts:
        box-1: {ansible_host: 192.0.2.3}
"""
SPACE = {"strategies": ["tp8"], "knobs": {"--cuda-graph-max-bs": [None, 32]}}


def _play(tmp_path, playbook, inventory, extra):
    (tmp_path / "hosts.yml").write_text(inventory)
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    env.pop("ANSIBLE_CONFIG", None)
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           os.path.join(ROOT, "playbooks", playbook), "-e", json.dumps(extra),
                           "-e", "ansible_python_interpreter=%s" % sys.executable],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          env=env, cwd=str(tmp_path), timeout=180, check=False)
    data = json.loads(proc.stdout[proc.stdout.index("{"):])
    ran = []
    for play in data["plays"]:
        for task in play["tasks"]:
            for host, res in task["hosts"].items():
                ran.append((task["task"]["name"], host, res))
    return proc, ran


@pytest.mark.parametrize("extra, expect", [
    ({"tune_space": SPACE, "tune_load": {"concurrencies": [0]}},
     ["tune_load.concurrencies must be a non-empty list of positive integers, got [0]"]),
    ({"tune_space": SPACE, "tune_hosts": "gpu-9"},
     ['tune_hosts "gpu-9": "gpu-9" is neither a host nor a group of the inventory']),
    ({"tune_space": SPACE, "tune_hosts": "sglang_servers:!gpu-*"},
     ['tune_hosts "sglang_servers:!gpu-*" selects no host of the inventory']),
    ({"tune_space": {"strategies": ["tp7x"]}, "keep": "worst", "tune_budget": "x", "tune_method": "grid",
      "tune_slo": {"tpot_p99_ms": -1}},
     ["5 problems with the tune's inputs", "unknown strategy 'tp7x'", 'keep must be best or original, got "worst"',
      'tune_budget must be a number of trials (0 for no limit), got "x"', 'tune_method must be one of',
      "tune_slo.tpot_p99_ms must be a positive number of milliseconds"]),
    ({}, ["tune_space is not set"]),
])
def test_the_tune_refuses_bad_inputs_in_its_first_task(tmp_path, extra, expect):
    proc, ran = _play(tmp_path, "tune.yml", INVENTORY, extra)
    assert proc.returncode != 0
    # nothing but the first task ran, on localhost
    assert [(name, host) for name, host, _res in ran] == [("Check every input of the tune at once", "localhost")]
    msg = ran[0][2]["msg"]
    for text in expect:
        assert text in msg, (text, msg)


def test_a_deploy_with_an_empty_server_group_is_refused(tmp_path):
    proc, ran = _play(tmp_path, "deploy.yml", EMPTY, {"strategy": "tp8"})
    assert proc.returncode != 0
    assert [(name, host) for name, host, _res in ran] == [
        ("Check that the target selects hosts of the inventory", "localhost")]
    msg = ran[0][2]["msg"]
    assert msg.startswith("nothing to deploy: group sglang_servers of the inventory %s has no host"
                          % (tmp_path / "hosts.yml")), msg


def test_a_deploy_target_that_names_no_host_is_refused(tmp_path):
    proc, ran = _play(tmp_path, "deploy.yml", EMPTY, {"strategy": "tp8", "target": "box-9"})
    assert proc.returncode != 0 and len(ran) == 1
    assert 'target "box-9": "box-9" is neither a host nor a group of the inventory' in ran[0][2]["msg"]
