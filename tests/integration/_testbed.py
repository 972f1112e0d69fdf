# -*- coding: utf-8 -*-
"""What the integration tests share: the environment for podman and ansible-playbook, one
runner for each, an HTTP probe of a published port, and the failure that stopped a run."""

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.path.dirname(sys.executable)
TESTBED = os.path.join(ROOT, "tests", "testbed")

#: The marks of every integration test: they need containers and run only when asked.
MARKS = [
    pytest.mark.integration,
    pytest.mark.skipif(os.environ.get("GPUFLEET_INTEGRATION") != "1",
                       reason="set GPUFLEET_INTEGRATION=1 to run the integration tests"),
]


def env(forks=1):
    """The environment of podman and ansible-playbook; ``forks=None`` keeps ansible.cfg's."""
    out = dict(os.environ)
    out.setdefault("CONTAINERS_CONF", os.path.join(TESTBED, "containers.conf"))
    out.update(ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               PATH=BIN + os.pathsep + out.get("PATH", ""))
    if forks is not None:
        out["ANSIBLE_FORKS"] = str(forks)
    return out


def podman_exec(host, *cmd, check=True, detach=False):
    argv = ["podman", "exec"] + (["-d"] if detach else []) + [host] + list(cmd)
    proc = subprocess.run(argv, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=60, check=False)
    if check:
        assert proc.returncode == 0, (argv, proc.stdout, proc.stderr)
    return proc


def playbook(inventories, path, *args, json_out=False, timeout=300, forks=1, extra_env=None):
    """``ansible-playbook`` with one or more inventory sources, from the repository root."""
    run_env = env(forks)
    run_env.update(extra_env or {})
    if json_out:
        run_env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.posix.json"
    argv = [os.path.join(BIN, "ansible-playbook")]
    for inventory in [inventories] if isinstance(inventories, str) else inventories:
        argv += ["-i", inventory]
    argv += [path] + list(args)
    return subprocess.run(argv, env=run_env, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout,
                          check=False)


def create_fleet(inventories, forks=1, timeout=300):
    """The test bed's create and prepare plays for a fleet; the CompletedProcess that failed,
    else None. ansible-playbook's rc 4 (a host unreachable) in prepare is tried once more
    after 5 s: once, in a full run, a fresh container's published SSH port did not answer
    for a moment."""
    for step in ("create.yml", "prepare.yml"):
        for attempt in (1, 2):
            proc = playbook(inventories, os.path.join(TESTBED, step), forks=forks,
                            timeout=timeout)
            if proc.returncode != 4 or attempt == 2:
                break
            time.sleep(5)
        if proc.returncode != 0:
            return step, proc
    return None


@contextlib.contextmanager
def fleet_up(inventories, forks=1):
    """The fleet of ``inventories`` created and prepared (the step that failed is the
    assertion's message) for the ``with`` block, destroyed after it unless
    GPUFLEET_KEEP_TESTBED=1."""
    failed = create_fleet(inventories, forks=forks)
    assert failed is None, (failed[0], failed[1].stdout[-3000:], failed[1].stderr[-2000:])
    try:
        yield
    finally:
        if os.environ.get("GPUFLEET_KEEP_TESTBED") != "1":
            playbook(inventories, os.path.join(TESTBED, "destroy.yml"))


def http_status(port, path="/health"):
    """The status of ``GET path`` on a port published on 127.0.0.1; -1 when nothing answers."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return -1


def callback_json(stdout):
    """The JSON callback's document in a run's stdout: what action plugins display while the
    run goes (the model step's progress lines) comes before it; {} without one."""
    if not stdout.startswith("{"):
        at = stdout.find("\n{")
        if at < 0:
            return {}
        stdout = stdout[at + 1:]
    try:
        return json.loads(stdout)
    except ValueError:
        return {}


def failures(proc):
    """Every failed result of a JSON-callback run, as (task name, host, message)."""
    data = callback_json(proc.stdout or "")
    found = []
    for play in data.get("plays", []):
        for task in play.get("tasks", []):
            for host, res in sorted(task.get("hosts", {}).items()):
                if res.get("failed") or res.get("unreachable"):
                    items = [r for r in res.get("results", []) if r.get("failed")]
                    res = items[0] if items else res
                    msg = res.get("msg") or res.get("censored") or json.dumps(res)[:800]
                    if isinstance(msg, list):
                        msg = " ".join(str(m) for m in msg)
                    found.append((task["task"]["name"], host, msg))
    return found


def failure(proc):
    """(task name, message) of the failure that stopped a JSON-callback run, else stderr.

    That is the last failed result (a rescued probe fails first, its rescue names the
    input); for a loop, the first failed item's message.
    """
    found = failures(proc)
    if found:
        return found[-1][0], found[-1][2]
    lines = [ln for ln in (proc.stderr or "").splitlines() if ln.strip()
             and not ln.startswith("[WARNING]")]
    return "(ansible-playbook itself)", " ".join(lines)[-1500:]
