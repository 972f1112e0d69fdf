"""Every molecule scenario as one pytest test.

The scenarios are found here (:func:`scenarios`: every ``extensions/molecule/*/molecule.yml``
of this checkout), so a new scenario directory is picked up without touching this file;
``tests/conftest.py`` orders them deploy, safety, multinode, compare, then the others by
name. pytest-ansible's molecule runner and its ``molecule_scenario`` fixture are not used
(deprecated upstream; they warned on every run); pytest-ansible stays for ``ansible_adhoc``.

They are run through the molecule CLI, not with pytest-ansible's ``MoleculeScenario.test()``
(or ``pytest --molecule``): both start molecule in the directory above ``molecule/``, i.e.
``extensions/``, where molecule 26 no longer runs in collection mode: it sees a role-like
project whose ``MOLECULE_PROJECT_DIRECTORY`` is ``extensions/``, so the scenarios'
``${MOLECULE_PROJECT_DIRECTORY}/.cache/collections`` misses this checkout's collection (and
an older copy in ~/.ansible/collections would be tested instead). Here molecule starts at
the collection root, as ``molecule test -s <name>`` by hand does.

The deploy scenario keeps its fleet (``--destroy=never``) so that the module tests of
``tests/integration/test_fleet_modules.py`` run against it next; they destroy it.

The ``real-release`` scenario (the real SGLang package, several GB) is opt-in: it is
skipped unless ``GPUFLEET_REAL=1`` (``scripts/test real``).

Each scenario's whole output goes to ``.cache/logs/molecule-<name>.log``; a failure shows
its last 150 lines, then every failed task of the log with its message (:func:`failed_tasks`:
CI keeps only the end of the output, where the recap would otherwise hide which assertion
failed and why). Run with GPUFLEET_INTEGRATION=1 (``scripts/test molecule`` sets it).
"""

import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
LOGS = os.path.join(ROOT, ".cache", "logs")  # one log per scenario, the whole output
KEEP_FLEET = {"deploy"}  # the fleet the module tests use next
# Opt-in scenarios: run only when their stage asks for them (scripts/test real sets
# GPUFLEET_REAL=1); the default run and .ci/run skip them.
OPT_IN = {"real-release": ("GPUFLEET_REAL", "real")}
MOLECULE = os.path.join(ROOT, "extensions", "molecule")


def scenarios(base=MOLECULE):
    """The scenario names: every directory of ``base`` that holds a molecule.yml."""
    return sorted(os.path.basename(os.path.dirname(path))
                  for path in glob.glob(os.path.join(base, "*", "molecule.yml")))


pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.environ.get("GPUFLEET_INTEGRATION") != "1",
                       reason="set GPUFLEET_INTEGRATION=1 to run the molecule scenarios"),
]


def failed_tasks(lines, width=2000):
    """The failed tasks of an Ansible log: the name of each task with its ``fatal:`` or
    ``failed:`` result, the lines of that result up to the next blank line (the callback
    writes the message over several), cut to ``width`` characters."""
    found = []
    task = None
    block = None
    for line in list(lines) + [""]:
        if block is not None:
            if line.strip() and not line.startswith(("TASK [", "PLAY ", "ok: [", "changed: [",
                                                     "skipping: [", "fatal: [", "failed: [")):
                block.append(line)
                continue
            text = "\n".join(block)
            found.append("%s\n%s" % (task or "(no task)", text[:width]))
            block = None
        if line.startswith("TASK ["):
            task = line.rstrip(" *")
        elif line.startswith(("fatal: [", "failed: [")):
            block = [line]
    return found


@pytest.mark.parametrize("scenario", scenarios(), ids=lambda name: "extensions-" + name)
def test_scenario(scenario):
    name = scenario
    if name in OPT_IN and os.environ.get(OPT_IN[name][0]) != "1":
        pytest.skip("opt-in scenario %s: run it with scripts/test %s (%s=1)"
                    % (name, OPT_IN[name][1], OPT_IN[name][0]))
    assert os.path.isfile(os.path.join(MOLECULE, name, "molecule.yml"))
    molecule = [sys.executable, "-m", "molecule"]
    env = dict(os.environ, PATH="%s:%s" % (BIN, os.environ.get("PATH", "")), NO_COLOR="1")
    os.makedirs(LOGS, exist_ok=True)
    log = os.path.join(LOGS, "molecule-%s.log" % name)
    with open(log, "wb") as out:
        if name in KEEP_FLEET:
            # --destroy=never also skips the sequence's first destroy: start clean here
            subprocess.run(molecule + ["destroy", "-s", name], cwd=ROOT, env=env, stdout=out,
                           stderr=subprocess.STDOUT, check=False)
            argv = molecule + ["test", "-s", name, "--destroy=never"]
        else:
            argv = molecule + ["test", "-s", name]
        res = subprocess.run(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                             check=False)
    if res.returncode != 0:
        with open(log, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
        failed = failed_tasks(lines)
        pytest.fail("molecule test -s %s exited %d (whole output: %s):\n%s\n\n"
                    "failed tasks (%d):\n%s"
                    % (name, res.returncode, log, "\n".join(lines[-150:]), len(failed),
                       "\n".join(failed) or "none in the log"), pytrace=False)
