"""tests/integration/_testbed.py: the failure of a JSON-callback run, also when the model
step's progress lines come before the callback's document (scripts/bench-model said only
"(ansible-playbook itself)" with an empty message for such a run)."""

import importlib.util
import json
import os
import types

from ansible_collections.gpufleet.sglang.tests.paths import ROOT

_SPEC = importlib.util.spec_from_file_location(
    "gpufleet_testbed", os.path.join(ROOT, "tests", "integration", "_testbed.py"))
testbed = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(testbed)

DOC = {"plays": [{"tasks": [
    {"task": {"name": "Start the swarm"}, "hosts": {"h1": {"changed": True}}},
    {"task": {"name": "Wait until this host holds every file"},
     "hosts": {"h2": {"failed": True, "msg": "the transfer on h2 ended: peer gone"}}}]}]}


def run(stdout, stderr=""):
    return types.SimpleNamespace(stdout=stdout, stderr=stderr)


def test_the_failed_task_is_found_after_progress_lines():
    stdout = ("model transfer h2: 9/12 files, 201.1 MiB of 256.1 MiB (swarm peer)\n"
              + json.dumps(DOC, indent=4))
    assert testbed.failure(run(stdout)) == ("Wait until this host holds every file",
                                            "the transfer on h2 ended: peer gone")
    assert testbed.failure(run(json.dumps(DOC))) == testbed.failure(run(stdout))


def test_without_the_document_the_message_is_stderr():
    assert testbed.callback_json("model transfer h2: 1/12 files\n") == {}
    assert testbed.failure(run("model transfer h2: 1/12 files\n", "ERROR! no inventory")) == (
        "(ansible-playbook itself)", "ERROR! no inventory")
