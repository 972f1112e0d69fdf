"""Controls of the documentation checks (tests/stages/test_checks.py): the same command lines
(tests/docs_tools.py) fail on broken copies of documents and pass the intact ones beside them,
in one run of each tool."""

import os
import re
import shutil

from ansible_collections.gpufleet.sglang.tests import docs_tools
from ansible_collections.gpufleet.sglang.tests.paths import ROOT

# A real document with fenced code blocks, tables and one H1.
MARKDOWN_SAMPLE = os.path.join(ROOT, "docs", "hardening.md")


def _messages(out, name):
    return [line for line in out.splitlines() if os.sep + name + ":" in line]


def _break_markdown(text):
    """name -> (broken text, the rule that must catch it)."""
    first = text.index("```")
    closing = text.index("\n```\n", text.index("\n", first)) + 1
    prose = text.index("\n\n", text.index("\n## ")) + 2
    return {
        # everything after a forgotten closing fence renders as code (CommonMark allows it)
        "unclosed-fence.md": (text[:closing] + text[closing + 4:], "GFL001"),
        # a placeholder written as a tag: GitHub drops it from the page
        "placeholder.md": (text[:prose] + "Pass -e target=<hosts>.\n\n" + text[prose:], "MD033"),
        "two-titles.md": (text + "\n# Another title\n", "MD025"),
    }


def test_the_markdown_lint_catches_broken_documents(tmp_path):
    with open(MARKDOWN_SAMPLE) as handle:
        text = handle.read()
    shutil.copy(MARKDOWN_SAMPLE, str(tmp_path / "intact.md"))
    broken = _break_markdown(text)
    for name, case in broken.items():
        (tmp_path / name).write_text(case[0])
    rc, out = docs_tools.run(docs_tools.markdown_lint_argv(
        sorted(str(p) for p in tmp_path.iterdir())))
    assert rc != 0, out
    assert not _messages(out, "intact.md"), out
    for name, case in broken.items():
        assert [m for m in _messages(out, name) if " %s: " % case[1] in m], (name, case[1], out)


_MODULE = '''DOCUMENTATION = r"""
module: NAME
short_description: A module whose documentation the control breaks
description: Waits O(timeout) seconds.
author: doc check (@doccheck)
options:
  timeout:
    description: Seconds to wait.
    type: TYPE
    default: 30
"""

EXAMPLES = r"""
- doccheck.sample.NAME:
    timeout: 5
"""

RETURN = r"""
"""
'''

_ROLE = '''---
argument_specs:
  main:
    short_description: A role whose argument spec the control breaks
    description: Runs nothing.
    options:
      NAME_port:
        description: Port of the server; defaults to C(server_port) when that is set.
        type: int
        default: DEFAULT
'''


def test_the_collection_docs_lint_catches_a_bad_option_type_and_a_templated_typed_default(tmp_path):
    """A collection with an intact and a broken module and role: the linter names the
    broken ones' options and nothing of the intact ones. The role's break is the one this
    collection's server and benchmark roles had (a Jinja default of an int option)."""
    coll = tmp_path / "collection"
    (coll / "plugins" / "modules").mkdir(parents=True)
    (coll / "galaxy.yml").write_text("namespace: doccheck\nname: sample\nversion: 1.0.0\n"
                                     "readme: README.md\nauthors: [doc check]\n")
    for name, typ in (("intact", "int"), ("broken", "integr")):
        (coll / "plugins" / "modules" / (name + ".py")).write_text(
            _MODULE.replace("NAME", name).replace("TYPE", typ))
    for name, default in (("intact", "30000"), ("broken", '"{{ server_port | default(30000) }}"')):
        (coll / "roles" / name / "meta").mkdir(parents=True)
        (coll / "roles" / name / "meta" / "argument_specs.yml").write_text(
            _ROLE.replace("NAME", name).replace("DEFAULT", default))
    rc, out = docs_tools.run(docs_tools.collection_docs_lint_argv(str(coll)))
    assert rc != 0, out
    assert "intact" not in out, out
    assert re.search(r"modules/broken\.py:.*\n.*options -> timeout -> type", out), out
    assert re.search(r"roles/broken/meta/argument_specs\.yml:.*\n.*options -> broken_port"
                     r"(.|\n)*cannot be converted to an int", out), out


def test_page_facts_tell_a_page_with_an_option_table_from_one_without():
    page = ('<html><head><title>x module \u2013 y</title></head><body><h1>x module \u2013 y'
            '<a class="headerlink" href="#h">\uf0c1</a></h1><a href="a_module.html">a</a>'
            '<table class="longtable ansible-option-table docutils"><tr><td><div id="parameter-b">'
            '<table><tr><td id="parameter-c"></td></tr></table></div></td></tr></table>'
            '<table class="other"><tr><td id="parameter-d"></td></tr></table></body></html>')
    facts = docs_tools.page_facts(page)
    assert facts["title"] == facts["h1"] == "x module \u2013 y"
    assert facts["links"] == ["#h", "a_module.html"]
    assert facts["option_tables"] == 1 and facts["options"] == ["b", "c"]
    plain = docs_tools.page_facts("<html><head><title>t</title></head><body><table></table></body></html>")
    assert plain["option_tables"] == 0 and plain["options"] == [] and plain["h1"] == ""


def test_chromium_waits_for_the_background_install_and_no_longer():
    """scripts/test installs Chromium beside the tests: the site's test waits while the
    install's process lives, and gives up at its bound."""
    now = [0.0]
    looks = []

    def installing():
        looks.append(now[0])
        return now[0] < 10

    def sleep(s):
        now[0] += s

    docs_tools.chromium(wait_s=100, clock=lambda: now[0], sleep=sleep, installing=installing)
    assert now[0] == 10 and len(looks) == 6
    now[0] = 0.0
    docs_tools.chromium(wait_s=4, clock=lambda: now[0], sleep=sleep, installing=lambda: True)
    assert now[0] == 4
