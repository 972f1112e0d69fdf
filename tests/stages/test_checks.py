"""The static checks as tests, so that ``scripts/test`` counts them in its one pytest summary:
ansible-lint (production profile, offline), the argument-spec lockstep check, the changelog
lint and ansible-test sanity. Each runs the tool as a user would; a failure shows its output.

Run with GPUFLEET_CHECKS=1 (``scripts/test lint sanity`` sets it): they take minutes.
"""

import os
import subprocess
import sys
import tempfile

import pytest

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


def test_ansible_test_sanity():
    _run([os.path.join("scripts", "sanity")], env={"GPUFLEET_VENV": os.path.dirname(BIN)})
