"""The documentation checks' tools and command lines (issue 47), shared by the checks
(tests/stages/test_checks.py) and their controls (tests/unit/test_docs_checks.py), so that a
control runs exactly what its check runs.

* antsibull-docs ``lint-collection-docs --plugin-docs``: the modules', plugins' and roles'
  documentation against antsibull-docs' schema, its references (``O()``, ``M()``, ``P()``,
  ``RV()``) against the collection, and the RST it renders through rstcheck;
* pymarkdownlnt over README.md, docs/ and the role READMEs, with ``.pymarkdown.yml`` (the
  rules that are off, and why) and the collection's own rule ``unclosed-fence``
  (tests/markdown/unclosed_fence.py);
* the documentation site (scripts/docs-site) opened in headless Chromium.
"""

import glob
import os
import subprocess
import sys
import time
from html.parser import HTMLParser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
MARKDOWN_CONFIG = os.path.join(ROOT, ".pymarkdown.yml")
MARKDOWN_RULES = (os.path.join(ROOT, "tests", "markdown", "unclosed_fence.py"),)
SITE = os.path.join(ROOT, ".cache", "docs-site", "build", "html")

# Headless Chromium that reaches no outside host: without the background-networking flags it
# fetches component updates, safe-browsing lists and the like at start.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")


def tool_env():
    """The environment the tools run in: the venv's bin first (antsibull-docs runs
    ``ansible`` and ``ansible-doc`` from PATH)."""
    return dict(os.environ, PATH="%s:%s" % (BIN, os.environ.get("PATH", "")))


def markdown_files(root=ROOT):
    """The Markdown the lint covers, relative to ``root``: README.md, docs/ (its
    subdirectories too) and roles/*/README.md."""
    found = ["README.md"]
    found += sorted(os.path.relpath(p, root)
                    for p in glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
    found += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "roles", "*", "README.md")))
    return found


def markdown_lint_argv(paths):
    argv = [os.path.join(BIN, "pymarkdown"), "--config", MARKDOWN_CONFIG]
    for rule in MARKDOWN_RULES:
        argv += ["--add-plugin", rule]
    return argv + ["scan"] + list(paths)


def collection_docs_lint_argv(collection):
    """antsibull-docs' linter over the collection at ``collection`` (a directory with a
    galaxy.yml): the extra docs and, with --plugin-docs, every module, plugin and role."""
    return [os.path.join(BIN, "antsibull-docs"), "lint-collection-docs", "--plugin-docs", collection]


def run(argv, cwd=ROOT, timeout=600):
    """(exit status, stdout + stderr) of one tool run."""
    res = subprocess.run(argv, cwd=cwd, env=tool_env(), capture_output=True, text=True,
                         check=False, timeout=timeout)
    return res.returncode, res.stdout + res.stderr


#: the process of scripts/bootstrap's background install of Chromium (scripts/test)
CHROMIUM_INSTALL_PID = os.path.join(ROOT, ".cache", "chromium-install.pid")


def _installing():
    try:
        with open(CHROMIUM_INSTALL_PID) as f:
            os.kill(int(f.read().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


def chromium(wait_s=900, clock=time.monotonic, sleep=time.sleep, installing=_installing):
    """The Chromium binary; while scripts/bootstrap still installs it in the background (the
    process of .cache/chromium-install.pid lives), wait for the install, at most ``wait_s``."""
    deadline = clock() + wait_s
    while installing() and clock() < deadline:
        sleep(2)
    for name in ("chromium", "chromium-browser"):
        for directory in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/bin"]:
            path = os.path.join(directory, name)
            if os.access(path, os.X_OK):
                return path
    return None


def dump_dom(path, profile, timeout=120):
    """The DOM of the local page ``path`` after Chromium loaded it (``--dump-dom``), with a
    fresh profile directory ``profile``."""
    argv = [chromium()] + list(CHROMIUM_FLAGS) + ["--user-data-dir=" + profile, "--dump-dom",
                                                  "file://" + os.path.abspath(path)]
    res = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    assert res.returncode == 0, "%s exited %d:\n%s" % (" ".join(argv), res.returncode, res.stderr[-3000:])
    return res.stdout


class _Page(HTMLParser):
    """What the site test looks at in a rendered page: the title, the first h1 (without its
    heading link), the links, and the option tables with the option names in them
    (antsibull-docs' rows carry ``id="parameter-<name>"``)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.h1 = ""
        self.links = []
        self.option_tables = 0
        self.options = []
        self._in = None
        self._h1_done = False
        self._table_depth = 0
        self._headerlink = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "title":
            self._in = "title"
        elif tag == "h1" and not self._h1_done:
            self._in = "h1"
        elif tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
            if "headerlink" in (attrs.get("class") or "").split():
                self._headerlink = True  # its text is the theme's link icon
        elif tag == "table":
            if self._table_depth or "ansible-option-table" in (attrs.get("class") or "").split():
                if not self._table_depth:
                    self.option_tables += 1
                self._table_depth += 1
        if self._table_depth and (attrs.get("id") or "").startswith("parameter-"):
            self.options.append(attrs["id"][len("parameter-"):])

    def handle_endtag(self, tag):
        if tag == "title" and self._in == "title":
            self._in = None
        elif tag == "h1" and self._in == "h1":
            self._in, self._h1_done = None, True
        elif tag == "table" and self._table_depth:
            self._table_depth -= 1
        elif tag == "a":
            self._headerlink = False

    def handle_data(self, data):
        if self._headerlink:
            return
        if self._in == "title":
            self.title += data
        elif self._in == "h1":
            self.h1 += data


def page_facts(dom):
    """title, h1 (whitespace folded), links, option_tables (count) and options (names, in
    page order) of a page's DOM."""
    page = _Page()
    page.feed(dom)
    page.close()
    return {"title": " ".join(page.title.split()), "h1": " ".join(page.h1.split()),
            "links": page.links, "option_tables": page.option_tables, "options": page.options}
