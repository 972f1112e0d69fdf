# -*- coding: utf-8 -*-
"""The documents are code (issues 42 and 47):

* the README renders on a Markdown renderer as written (markdown-it-py, CommonMark with
  tables, the renderer GitHub's own is built on): every fence closed, no code block longer
  than 40 lines, every line that starts with ``|`` part of a table. The README of
  ``ff2c1fe`` (``tests/fixtures/docs/README-ff2c1fe.md``, a verbatim copy) is the control:
  its "smallest inventory" fence never closed and its tables had no separator rows, and the
  same checks fail it;
* every tune space shown in the README, ``docs/`` and ``examples/`` passes the tune's own
  space check (``tune/space.expand``) against the default release's ``--help``; the
  ``--cuda-graph-max-bs`` of ``ff2c1fe``'s example, which 0.5.23 does not have, fails it;
* the README's command for the demo fleet names ``examples/tune.yml``, and the space the
  README shows is that file, line for line.
"""

import glob
import json
import os
import re
import shlex
import subprocess
import sys

import pytest
import yaml
from markdown_it import MarkdownIt

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_help import parse_help
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import space as tune_space
from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES, ROOT, SGLANG_HELP

DEFAULT_RELEASE = "0.5.23"
MAX_BLOCK_LINES = 40
CONTROL = os.path.join(FIXTURES, "docs", "README-ff2c1fe.md")


def _read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _documents():
    paths = [os.path.join(ROOT, "README.md")]
    paths += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    paths += sorted(glob.glob(os.path.join(ROOT, "roles", "*", "README.md")))
    return paths


def render_problems(text):
    """What keeps ``text`` from rendering as written, one line each."""
    problems = []
    lines = text.split("\n")
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    table_lines = set()
    for tok in tokens:
        if tok.type == "table_open" and tok.map:
            table_lines.update(range(tok.map[0], tok.map[1]))
    for tok in tokens:
        if tok.type not in ("fence", "code_block") or not tok.map:
            continue
        first, end = tok.map
        if end - first > MAX_BLOCK_LINES:
            problems.append("line %d: a code block of %d lines" % (first + 1, end - first))
        if tok.type == "fence":
            opener = lines[first].strip()
            marker = re.match(r"^(`{3,}|~{3,})", opener).group(1)
            closer = lines[end - 1].strip() if end - 1 > first else ""
            if not (closer.startswith(marker[0] * len(marker)) and set(closer) <= set(marker[0])):
                problems.append("line %d: the fence %r never closes" % (first + 1, opener))
    fenced = set()
    for tok in tokens:
        if tok.type in ("fence", "code_block") and tok.map:
            fenced.update(range(*tok.map))
    for num, line in enumerate(lines):
        if line.startswith("|") and num not in table_lines and num not in fenced:
            problems.append("line %d: a table row outside a table: %s" % (num + 1, line[:60]))
    return problems


@pytest.mark.parametrize("path", _documents(), ids=lambda p: os.path.relpath(p, ROOT))
def test_the_document_renders(path):
    assert render_problems(_read(path)) == []


def test_the_readme_of_ff2c1fe_is_caught():
    problems = render_problems(_read(CONTROL))
    assert any("never closes" in p for p in problems), problems
    assert any("a code block of" in p for p in problems), problems
    # the fence hid the rest: with only the fence closed, its tables still have no
    # separator row and render as paragraphs
    lines = _read(CONTROL).split("\n")
    at = lines.index("    sglang_model_repo: moonshotai/Kimi-K2.5")
    closed = "\n".join(lines[:at + 1] + ["```"] + lines[at + 1:])
    rows = [p for p in render_problems(closed) if "a table row outside a table" in p]
    assert len(rows) >= 2, render_problems(closed)


def test_the_readme_links_the_conventions():
    tokens = MarkdownIt("commonmark").enable("table").parse(_read(os.path.join(ROOT, "README.md")))
    inline = " ".join(t.content for t in tokens if t.type == "inline")
    assert "docs/CONVENTIONS.md" in inline


def tune_spaces(text):
    """Every YAML snippet of ``text`` that holds ``tune_space:`` (fenced or not: the control
    had its example outside any fence), from that line to the first blank line."""
    lines = text.split("\n")
    found = []
    for num, line in enumerate(lines):
        if not line.startswith("tune_space:"):
            continue
        end = num
        while end < len(lines) and lines[end].strip() and not lines[end].startswith("```"):
            end += 1
        found.append((num + 1, yaml.safe_load("\n".join(lines[num:end]))))
    return found


def _space_problems(text, flags):
    problems = []
    for line, doc in tune_spaces(text):
        try:
            tune_space.expand(doc["tune_space"], flags, DEFAULT_RELEASE)
        except tune_space.SpaceError as exc:
            problems.append("line %d: %s" % (line, "; ".join(exc.problems)))
    return problems


@pytest.fixture(scope="module")
def default_flags():
    return parse_help(_read(os.path.join(SGLANG_HELP, "sglang-%s.txt" % DEFAULT_RELEASE)))["flags"]


def _example_files():
    return sorted(glob.glob(os.path.join(ROOT, "examples", "*.yml")))


@pytest.mark.parametrize("path", _documents() + _example_files(), ids=lambda p: os.path.relpath(p, ROOT))
def test_every_tune_space_shown_passes_the_space_check(path, default_flags):
    assert _space_problems(_read(path), default_flags) == []


def test_the_space_of_ff2c1fe_is_refused(default_flags):
    problems = _space_problems(_read(CONTROL), default_flags)
    assert problems and "--cuda-graph-max-bs" in problems[0], problems


def test_the_documents_show_tune_spaces():
    # the check above is not vacuous: the README, docs/tune.md and the example hold spaces
    for rel in ("README.md", "docs/tune.md", "examples/tune.yml"):
        assert tune_spaces(_read(os.path.join(ROOT, rel))), rel


def demo_tune_command(readme):
    """The README's tune command for the demo fleet, as argv."""
    found = [line for line in readme.split("\n")
             if "playbooks/tune.yml" in line and "inventories/local" in line]
    assert len(found) == 1, found
    return shlex.split(found[0])


def test_the_readme_shows_the_example_it_runs():
    readme = _read(os.path.join(ROOT, "README.md"))
    argv = demo_tune_command(readme)
    example = argv[argv.index("-e") + 1]
    assert example.startswith("@")
    text = _read(os.path.join(ROOT, example[1:]))
    assert text in readme, "the README shows %s line for line" % example[1:]


# ------------------------------------------------------------------ the inventories shown

CHECK_PLAY = """
- hosts: sglang_servers
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: gpufleet.sglang.server
        tasks_from: check
"""


def inventories(text):
    """``(line, inventory, strategy, problem)`` of every YAML block of ``text`` that is an inventory (a
    group with ``hosts``), with the strategy of the first command after it that passes one
    (``-e sglang_strategy=...``); a YAML block that does not parse is a problem."""
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    fences = [t for t in tokens if t.type == "fence"]
    found = []
    for num, tok in enumerate(fences):
        if tok.info.strip() != "yaml":
            continue
        try:
            doc = yaml.safe_load(tok.content)
        except yaml.YAMLError as exc:
            found.append((tok.map[0] + 1, None, None, "not YAML: %s" % str(exc).split("\n", maxsplit=1)[0]))
            continue
        if not (isinstance(doc, dict) and any(isinstance(v, dict) and "hosts" in v for v in doc.values())):
            continue
        strategy = None
        for later in fences[num + 1:]:
            match = re.search(r"-e (?:sglang_)?strategy=(\S+)", later.content)
            if match:
                strategy = match.group(1)
                break
        found.append((tok.map[0] + 1, doc, strategy, None))
    return found


def _check_inventory(tmp_path, doc, strategy):
    """The controller's deploy inputs check (the server role's ``check`` entry point, as the
    deploy's first play runs it) over ``doc`` with the default release; the hosts are this
    machine (a second inventory source gives them a local connection, nothing else)."""
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(doc))
    (tmp_path / "local.yml").write_text(yaml.safe_dump(
        {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}))
    (tmp_path / "play.yml").write_text(CHECK_PLAY)
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"), ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_CONFIG", None)
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            "-i", str(tmp_path / "hosts.yml"), "-i", str(tmp_path / "local.yml"), str(tmp_path / "play.yml")]
    if strategy:
        argv += ["-e", "sglang_strategy=%s" % strategy]
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          env=env, cwd=str(tmp_path), timeout=180, check=False)
    checked = {}
    for play in json.loads(proc.stdout).get("plays", []):
        for task in play["tasks"]:
            if task["task"]["name"].endswith("Check the deploy inputs"):
                checked.update(task["hosts"])
    return proc.returncode, checked


def _inventory_problems(tmp_path, text):
    problems = []
    for num, (line, doc, strategy, problem) in enumerate(inventories(text)):
        if problem:
            problems.append("line %d: %s" % (line, problem))
            continue
        work = tmp_path / ("inventory-%d" % num)
        work.mkdir(parents=True)
        rc, checked = _check_inventory(work, doc, strategy)
        refused = dict((h, r.get("msg")) for h, r in checked.items() if r.get("failed"))
        if rc != 0 or refused or not checked:
            problems.append("line %d: rc %d, refused %s" % (line, rc, refused))
    return problems


def test_every_inventory_shown_passes_the_deploy_inputs_check(tmp_path):
    readme = _read(os.path.join(ROOT, "README.md"))
    shown = [doc for _line, doc, _strategy, _problem in inventories(readme) if doc]
    assert shown, "the README shows the smallest inventory"
    paths = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    problems = []
    for path in paths:
        problems += ["%s %s" % (os.path.relpath(path, ROOT), p)
                     for p in _inventory_problems(tmp_path / os.path.basename(path), _read(path))]
    assert problems == []


def test_the_check_refuses_the_readme_inventory_without_its_model(tmp_path):
    # the check is no formality: the same inventory without sglang_model_repo is refused
    _line, doc, strategy, _problem = [i for i in inventories(_read(os.path.join(ROOT, "README.md"))) if i[1]][0]
    for group in doc.values():
        (group.get("vars") or {}).pop("sglang_model_repo", None)
    rc, checked = _check_inventory(tmp_path, doc, strategy)
    assert rc != 0
    assert all("sglang_model_repo is not set" in (r.get("msg") or "") for r in checked.values()), checked


def test_the_inventory_of_ff2c1fe_is_caught(tmp_path):
    # its fence never closed: the "inventory" ran on to the end of the README
    problems = _inventory_problems(tmp_path, _read(CONTROL))
    assert problems and "not YAML" in problems[0], problems
