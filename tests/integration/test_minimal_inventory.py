# -*- coding: utf-8 -*-
"""Integration: an inventory that lists the hosts and nothing else (issue 14).

``deploy.yml`` with it fails once, in the first play, and its one message names every
required input. Adding exactly the inputs that message names (with the example values a
user would give) is enough for the deploy to succeed: the release is the roles' default
(the newest tested one) and the GPUs are read on the host.

The host is one systemd container of the test bed (``tests/integration/minimal_inventory/``:
``hosts.yml`` is what the user wrote, ``testbed.yml`` what the test bed gives in place of
GPU hardware, a CUDA toolkit and PyPI's sglang). Runs only with GPUFLEET_INTEGRATION=1.
"""

import json
import os
import re

import pytest

import _testbed

HERE = os.path.dirname(os.path.abspath(__file__))

pytestmark = _testbed.MARKS

INVENTORY = os.path.join(HERE, "minimal_inventory")
HOST = "gpufleet-min-1"
HTTP_PORT = 39601
# What a user gives for each input the refusal may name: the model is the Hub double's repo
# (tests/hub_double), which the model step places on the host.
ANSWERS = {"strategy": "pp8", "sglang_model_repo": "gpufleet-test/tiny-model"}
MODEL_PATH = "/models/gpufleet-test--tiny-model/main"
DEFAULT_RELEASE = "0.5.23"


def _run(path, *args, json_out=False):
    return _testbed.playbook(INVENTORY, path, *args, json_out=json_out)


@pytest.fixture(scope="module")
def host():
    with _testbed.fleet_up(INVENTORY):
        yield HOST


def test_hosts_only_fails_once_naming_every_input_and_those_inputs_suffice(host):
    bare = _run("playbooks/deploy.yml", json_out=True)
    failed = _testbed.failures(bare)
    assert bare.returncode != 0
    # one refusal, from the first play, in the collection's own words
    assert [(task, h) for task, h, _msg in failed] == [
        ("gpufleet.sglang.server : Check the deploy inputs", host)], failed
    msg = failed[0][2]
    assert msg.startswith("%s: 2 problems with the deploy inputs:" % host), msg
    named = re.findall(r"^- (\S+) is not set: .* \(e\.g\. .+\)$", msg, re.M)
    assert sorted(named) == sorted(ANSWERS), msg
    for noise in ("Error while resolving", "Finalization of task args", "is undefined"):
        assert noise not in bare.stdout, noise
    # nothing reached the host
    assert _testbed.podman_exec(host, "test", "-e", "/opt/sglang", check=False).returncode != 0

    # exactly the named inputs, nothing else
    extra = dict((name if name != "strategy" else "sglang_strategy", ANSWERS[name]) for name in named)
    done = _run("playbooks/deploy.yml", "-e", json.dumps(extra), json_out=True)
    assert done.returncode == 0, _testbed.failure(done)
    assert _testbed.http_status(HTTP_PORT) == 200
    fact = json.loads(_testbed.podman_exec(host, "cat", "/etc/ansible/facts.d/sglang.fact").stdout)
    assert fact["release"] == DEFAULT_RELEASE, fact
    assert fact["strategy"] == "pp8", fact
    # the server runs from the directory the model step derived from the repo and verified
    argv = fact["argv"] if isinstance(fact["argv"], str) else " ".join(fact["argv"])
    assert "--model-path %s" % MODEL_PATH in argv, argv
    assert _testbed.podman_exec(host, "test", "-f", MODEL_PATH + "/config.json",
                                check=False).returncode == 0
