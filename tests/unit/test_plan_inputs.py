# -*- coding: utf-8 -*-
"""Issue 47: the memory planner's inputs are one mapping, ``__server_plan``, which the server
role's check keeps; every planner call of the YAML (prepare's preflight, the tune's gate,
the deploy's model step) uses it, with its own differences as an explicit ``combine``,
instead of writing the mapping out again."""

import os

import yaml

from ansible_collections.gpufleet.sglang.tests.paths import ROOT

PLAN_KEYS = {"gpu_count", "gpu_memory_mib", "nnodes", "mem_fraction_static", "context_length",
             "kv_dtype", "allow_unfit", "release"}


def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            if key in node:
                yield from _tasks(node[key])


def _yaml_files(root):
    for top in ("playbooks", "roles"):
        for dirpath, _dirs, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if name.endswith((".yml", ".yaml")):
                    yield os.path.join(dirpath, name)


def planner_calls(root=ROOT):
    """``{relative path: [what is passed]}``: the ``plan`` of every server_preflight task and
    every ``model_capacity`` given to a role, in the playbooks and roles."""
    out = {}
    for path in _yaml_files(root):
        with open(path) as handle:
            doc = yaml.safe_load(handle)
        for task in _tasks(doc):
            given = []
            preflight = task.get("gpufleet.sglang.server_preflight")
            if isinstance(preflight, dict) and "plan" in preflight:
                given.append(preflight["plan"])
            if isinstance(task.get("vars"), dict) and "model_capacity" in task["vars"]:
                given.append(task["vars"]["model_capacity"])
            if given:
                out.setdefault(os.path.relpath(path, root), []).extend(given)
    return out


def literal_mappings(calls):
    """The calls that write the planner's inputs out instead of using ``__server_plan``."""
    return sorted(path for path, given in calls.items() for value in given
                  if not (isinstance(value, str) and value.strip().startswith("{{ __server_plan")))


def test_the_check_keeps_the_one_mapping():
    with open(os.path.join(ROOT, "roles", "server", "tasks", "check.yml")) as handle:
        tasks = list(_tasks(yaml.safe_load(handle)))
    kept = [t["ansible.builtin.set_fact"]["__server_plan"] for t in tasks
            if "__server_plan" in (t.get("ansible.builtin.set_fact") or {})]
    assert len(kept) == 1 and set(kept[0]) == PLAN_KEYS


def test_every_planner_call_uses_it():
    calls = planner_calls()
    assert sorted(calls) == ["playbooks/deploy.yml", "playbooks/tasks/tune_gate.yml",
                             "roles/server/tasks/prepare.yml"]
    assert literal_mappings(calls) == []
    assert calls["roles/server/tasks/prepare.yml"] == ["{{ __server_plan }}"]
    # the differences are explicit: the gate refuses a misfit; the model step adds its own
    assert calls["playbooks/tasks/tune_gate.yml"] == ["{{ __server_plan | combine({'allow_unfit': false}) }}"]
    model = calls["playbooks/deploy.yml"][0]
    for key in ("'strategy'", "'gpu_count'", "'extra_args'"):
        assert key in model


def test_a_mapping_written_out_is_found(tmp_path):
    """The control: a task that writes the mapping out again (as the three places did)."""
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "x.yml").write_text(
        "- name: P\n  hosts: all\n  tasks:\n"
        "    - name: Plan\n      gpufleet.sglang.server_preflight:\n"
        "        plan:\n          gpu_count: \"{{ server_gpu_count }}\"\n          allow_unfit: false\n"
        "    - name: Model\n      ansible.builtin.include_role:\n        name: gpufleet.sglang.model\n"
        "      vars:\n        model_capacity: \"{{ __server_plan }}\"\n")
    calls = planner_calls(str(tmp_path))
    assert literal_mappings(calls) == ["playbooks/x.yml"]
    assert calls["playbooks/x.yml"][1] == "{{ __server_plan }}"
