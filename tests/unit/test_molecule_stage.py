"""tests/stages/test_molecule.py: what a failed scenario shows at the end of its output."""

import importlib.util
import os

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
