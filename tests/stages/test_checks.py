"""The static checks as tests, so that ``scripts/test`` counts them in its one pytest summary:
ansible-lint (production profile, offline), the argument-spec lockstep check, the changelog
lint, the documentation (antsibull-docs' collection linter, pymarkdownlnt, the documentation
site in headless Chromium) and ansible-test sanity. Each runs the tool as a user would; a
failure shows its output.

Run with GPUFLEET_CHECKS=1 (``scripts/test lint sanity`` sets it): they take minutes.
"""

import os
import subprocess
import sys
import tempfile
import time

import pytest
import yaml

from ansible_collections.gpufleet.sglang.tests import docs_tools

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)

pytestmark = pytest.mark.skipif(os.environ.get("GPUFLEET_CHECKS") != "1",
                                reason="set GPUFLEET_CHECKS=1 to run the static checks")


def _run(argv, env=None):
    full = dict(os.environ, PATH="%s:%s" % (BIN, os.environ.get("PATH", "")))
    full.update(env or {})
    res = subprocess.run(argv, cwd=ROOT, env=full, capture_output=True, text=True, check=False)
    out = (res.stdout + res.stderr)[-6000:]
    assert res.returncode == 0, "%s exited %d:\n%s" % (" ".join(argv), res.returncode, out)


def test_ansible_lint():
    # A private HOME: molecule installs a copy of this collection into
    # ~/.ansible/collections, and ansible-lint would check against that (older) copy.
    with tempfile.TemporaryDirectory() as home:
        _run([os.path.join(BIN, "ansible-lint"), "--offline", "-q"], env={"HOME": home})


def test_argument_specs_in_lockstep_with_defaults():
    _run([sys.executable, os.path.join("scripts", "check_argument_specs.py")])


def test_changelog_fragments():
    _run([os.path.join(BIN, "antsibull-changelog"), "lint"])


def test_collection_docs_lint():
    """antsibull-docs' linter over the collection, modules, plugins and roles included
    (control: tests/unit/test_docs_checks.py)."""
    rc, out = docs_tools.run(docs_tools.collection_docs_lint_argv(ROOT))
    assert rc == 0, "antsibull-docs lint-collection-docs exited %d:\n%s" % (rc, out[-6000:])


def test_markdown_lint():
    """pymarkdownlnt over README.md, docs/ and the role READMEs (.pymarkdown.yml; control:
    tests/unit/test_docs_checks.py)."""
    rc, out = docs_tools.run(docs_tools.markdown_lint_argv(docs_tools.markdown_files()))
    assert rc == 0, "pymarkdown exited %d:\n%s" % (rc, out[-6000:])


# The module page the site test opens; its options have no doc fragment, so the page's option
# table lists exactly those of its DOCUMENTATION.
SITE_MODULE = "server_health"


def _documented(path):
    """short_description and option names of a module's DOCUMENTATION."""
    with open(path) as handle:
        source = handle.read()
    text = source[source.index('DOCUMENTATION = r"""') + len('DOCUMENTATION = r"""'):]
    doc = yaml.safe_load(text[:text.index('"""')])
    return doc["short_description"], sorted(doc["options"])


def test_docs_site(tmp_path):
    """scripts/docs-site builds the site; headless Chromium opens its index and one module
    page, which render with their titles, the index's links to every module, filter and
    role page, and the module's option table."""
    start = time.monotonic()
    _run([os.path.join("scripts", "docs-site")], env={"GPUFLEET_VENV": os.path.dirname(BIN)})
    built = time.monotonic()
    assert docs_tools.chromium(), "no chromium on PATH (scripts/bootstrap installs Debian's package; " \
        "its background install's log: .cache/chromium-install.log)"
    index = docs_tools.page_facts(docs_tools.dump_dom(os.path.join(docs_tools.SITE, "index.html"),
                                                      str(tmp_path / "profile-index")))
    page = docs_tools.page_facts(docs_tools.dump_dom(
        os.path.join(docs_tools.SITE, SITE_MODULE + "_module.html"), str(tmp_path / "profile-module")))
    shown = time.monotonic()

    assert "gpufleet.sglang" in index["title"], index["title"]
    modules = sorted(n[:-3] for n in os.listdir(os.path.join(ROOT, "plugins", "modules"))
                     if n.endswith(".py") and not n.startswith("_"))
    filters = sorted(n[:-4] for n in os.listdir(os.path.join(ROOT, "plugins", "filter")) if n.endswith(".yml"))
    roles = sorted(os.listdir(os.path.join(ROOT, "roles")))
    wanted = (["%s_module.html" % n for n in modules] + ["%s_filter.html" % n for n in filters]
              + ["%s_role.html" % n for n in roles])
    missing = [href for href in wanted if href not in index["links"]]
    assert not missing, "the index does not link: %s" % missing
    # the control of the option-table check: the index has none
    assert index["option_tables"] == 0, index

    short, options = _documented(os.path.join(ROOT, "plugins", "modules", SITE_MODULE + ".py"))
    title = "gpufleet.sglang.%s module \u2013 %s" % (SITE_MODULE, short)
    assert page["h1"] == title, (page["h1"], title)
    assert page["title"].startswith(title), (page["title"], title)
    assert page["option_tables"] >= 1 and sorted(page["options"]) == options, (page["options"], options)
    with open(os.path.join(ROOT, ".cache", "docs-site", "timings.txt"), "w") as handle:
        handle.write("build %.1f s, browser %.1f s\n" % (built - start, shown - built))


def test_ansible_test_sanity():
    _run([os.path.join("scripts", "sanity")], env={"GPUFLEET_VENV": os.path.dirname(BIN)})
