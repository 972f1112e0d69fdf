# -*- coding: utf-8 -*-
"""The Jinja-chain rule (docs/CONVENTIONS.md): a playbook or role task file holds no Jinja
chain of more than one filter across hosts (``map('extract', hostvars ...)``, ``selectattr``
or ``rejectattr`` over hostvars, ``zip`` over hosts) unless a comment in the task says why a
plugin cannot hold it (``# jinja-chain: <why>``). What a fleet computes across hosts is a
filter or an action plugin with unit tests.

OFFENDERS lists chains allowed for a while (each entry names the work that removes it); it
is empty now. A chain not on the list fails; so does an entry that no longer matches (the
list only shrinks)."""

import os
import re

import yaml

from ansible_collections.gpufleet.sglang.tests.paths import ROOT
TOPS = ("playbooks", "roles")
EXEMPT = "jinja-chain:"

# (file, task name) -> the branch that rewrites it
OFFENDERS = {}  # emptied once the control-plane and swarm branches landed

_ACROSS = re.compile(r"\bhostvars\b|\bansible_play_(?:hosts|batch)(?:_all)?\b|\bgroups\b")
_PATTERN = re.compile(r"map\(\s*['\"]extract['\"]|\b(?:select|reject)attr\(|\bzip\(")
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def filters_in(expr):
    """How many filters an expression applies (``|`` outside string literals, not ``||``)."""
    bare = _STRING.sub("''", expr)
    return len(re.findall(r"(?<!\|)\|(?!\|)", bare))


def is_chain_across_hosts(expr):
    return bool(_ACROSS.search(expr) and _PATTERN.search(expr) and filters_in(expr) > 1)


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
                continue  # their tasks are visited on their own
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


def _tasks(node):
    """Every task and play (a mapping with a name) of a YAML document, nested ones too."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        if "name" in node:
            yield node
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            if key in node:
                yield from _tasks(node[key])


def _task_text(text, name):
    """The lines of the task named ``name`` (from its ``- name:`` line to the next one),
    with the comment lines just above it."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^\s*-?\s*name:\s*[\"']?%s[\"']?\s*$" % re.escape(name), line):
            start = i
            while start > 0 and lines[start - 1].strip().startswith("#"):
                start -= 1
            end = i + 1
            while end < len(lines) and not re.match(r"^\s*- name:", lines[end]):
                end += 1
            while end > i + 1 and lines[end - 1].strip().startswith("#"):
                end -= 1  # the comments above the next task are that task's
            return "\n".join(lines[start:end])
    return ""


def chains(root=ROOT):
    """(file, task name) of every task with a Jinja chain across hosts and no exemption."""
    found = set()
    for top in TOPS:
        for dirpath, _dirs, files in os.walk(os.path.join(root, top)):
            for fname in sorted(files):
                if not fname.endswith((".yml", ".yaml")):
                    continue
                path = os.path.join(dirpath, fname)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
                try:
                    data = yaml.safe_load(text)
                except yaml.YAMLError:
                    continue
                for task in _tasks(data):
                    if any(is_chain_across_hosts(s) for s in _strings(task)):
                        if EXEMPT not in _task_text(text, str(task["name"])):
                            found.add((rel, str(task["name"])))
    return found


def test_no_jinja_chain_across_hosts_outside_the_list():
    found = chains()
    assert sorted(found - set(OFFENDERS)) == []


def test_every_listed_offender_is_still_there():
    """An entry whose chain is gone is removed from the list (it only shrinks)."""
    assert sorted(set(OFFENDERS) - chains()) == []


def test_the_rule_sees_a_chain_and_its_exemption(tmp_path):
    (tmp_path / "roles" / "r" / "tasks").mkdir(parents=True)
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "roles" / "r" / "tasks" / "main.yml").write_text(
        "- name: Chain\n"
        "  ansible.builtin.debug:\n"
        "    msg: \"{{ ansible_play_hosts | map('extract', hostvars) | selectattr('x') | list }}\"\n"
        "# jinja-chain: a plugin cannot see the play's loop variable here\n"
        "- name: Exempt\n"
        "  ansible.builtin.debug:\n"
        "    msg: \"{{ ansible_play_hosts | map('extract', hostvars) | selectattr('x') | list }}\"\n"
        "- name: One filter\n"
        "  ansible.builtin.debug:\n"
        "    msg: \"{{ ansible_play_hosts | gpufleet.sglang.hosts_with(hostvars, 'x') | length }}\"\n"
        "- name: Not across hosts\n"
        "  ansible.builtin.debug:\n"
        "    msg: \"{{ dict(names | zip(values | map('basename'))) }}\"\n")
    assert chains(str(tmp_path)) == {("roles/r/tasks/main.yml", "Chain")}
    assert filters_in("a | b('|') | c") == 2
