# -*- coding: utf-8 -*-
"""The production roles and playbooks hold no test bed (issue 47): no variable of the test
bed (``testbed_*``) and no test-only switch (``gpufleet_test_*``) in any role or playbook
file. The router scenario stops a deploy at a step through the server role's documented
input ``server_step_hooks``, pointing it at ``tests/testbed/tasks/step_hook.yml``; the rule's
control shows that file is exactly what the scan would refuse in a role."""

import os
import re

from ansible_collections.gpufleet.sglang.tests.paths import ROOT

TOPS = ("playbooks", "roles")
TEST_NAMES = re.compile(r"\b(?:testbed_[a-z_]+|gpufleet_test_[a-z_]+)\b")


def offenders(tops=TOPS, root=ROOT):
    """``(path, line number, name)`` of every test-bed name in the files under ``tops``."""
    found = []
    for top in tops:
        for folder, _dirs, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".yml", ".yaml", ".j2", ".py")):
                    continue
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as handle:
                    for number, line in enumerate(handle, 1):
                        for match in TEST_NAMES.finditer(line):
                            found.append((os.path.relpath(path, root), number, match.group(0)))
    return found


def test_no_role_or_playbook_names_the_test_bed():
    assert offenders() == []


def test_the_scan_finds_the_test_bed_s_hook_file():
    # control: the hook file the scenario injects would be refused inside a role
    found = offenders(tops=(os.path.join("tests", "testbed", "tasks"),))
    assert ("tests/testbed/tasks/step_hook.yml", "testbed_hook_file") in [
        (path.replace(os.sep, "/"), name) for path, _number, name in found]


def test_the_server_role_includes_the_hook_at_each_step():
    steps = set()
    for name in os.listdir(os.path.join(ROOT, "roles", "server", "tasks")):
        with open(os.path.join(ROOT, "roles", "server", "tasks", name), encoding="utf-8") as handle:
            steps.update(re.findall(r"server_step_hooks\.([a-z_]+) \}\}", handle.read()))
    assert steps == {"after_leave", "after_drain", "after_unit", "health_wait", "before_readd"}
