# -*- coding: utf-8 -*-
"""Integration (issue 42): the tune on the user's path, as the README gives it.

From the checkout as a new user has it: ``scripts/demo`` (two containers, the default
release, the README's smallest inventory shape with ``sglang_model_repo``, the weights from
the Hub double, pp8), then the README's tune command for the demo fleet with the README's
example space (``examples/tune.yml``), run as the README prints it (``tests/unit/test_docs.py``
checks that the README shows that file and that its space passes the space check):

1. with ``-e keep=original``, killed (SIGKILL to the controller's whole process group) once
   the first round's trials are journaled, resumed and killed again after the next round,
   then resumed to its end: every trial is measured by ``bench_serving`` of the default
   release on its own host (none failed), at most the example's budget, and both trial
   hosts end on what they served before the first run (pp8 with the inventory's flags),
   although the killed runs left other candidates in their deployment records;
2. then the README's command alone, no extra ``-e``: nothing new is measured (the journal
   is unchanged), the run ends rc 0 with the winner, and both hosts serve it.

Its fleet is the demo's own (gpufleet-demo-1..2, HTTP 30001-30002, SSH 22201-22202, the
Hub double on 39470-39471), destroyed after the test with ``scripts/demo --destroy`` unless
GPUFLEET_KEEP_TESTBED=1. The tune writes to ``reports/`` of the checkout as a user's would;
a journal already there is moved aside first (``tune-journal.jsonl.before-test``).
"""

import glob
import json
import os
import shlex
import signal
import subprocess
import time

import pytest

import _testbed

pytestmark = _testbed.MARKS

ROOT = _testbed.ROOT
HOSTS = {"gpufleet-demo-1": 30001, "gpufleet-demo-2": 30002}
REPORTS = os.path.join(ROOT, "reports")
JOURNAL = os.path.join(REPORTS, "tune-journal.jsonl")
STATE_DIR = "/var/lib/sglang/emulator"


def _read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def readme_command():
    """The README's tune command for the demo fleet, as argv (its one line that names
    playbooks/tune.yml and inventories/local)."""
    lines = [line for line in _read(os.path.join(ROOT, "README.md")).split("\n")
             if "playbooks/tune.yml" in line and "inventories/local" in line]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])


def trials():
    if not os.path.exists(JOURNAL):
        return []
    lines = [json.loads(line) for line in _read(JOURNAL).splitlines() if line.strip()]
    return [line for line in lines if line.get("kind") == "trial"]


def server_info(host):
    import urllib.request  # pylint: disable=import-outside-toplevel
    with urllib.request.urlopen("http://127.0.0.1:%d/server_info" % HOSTS[host], timeout=10) as resp:
        return json.load(resp)


def starts(host):
    proc = _testbed.podman_exec(host, "cat", STATE_DIR + "/starts.jsonl")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def layout(info):
    return tuple(int(info.get(k) or 1) for k in ("tp_size", "pp_size", "ep_size"))


def run(argv, out, kill_at_trials=None, timeout=1500):
    """One run of the README's command from the checkout (as a user types it there); with
    ``kill_at_trials``, SIGKILL to the controller's process group once the journal holds
    that many trials. Returns (rc, output, killed)."""
    with open(out, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=_testbed.env(forks=None), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        killed = False
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            if kill_at_trials is not None and len(trials()) >= kill_at_trials:
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.5)
        if proc.poll() is None and not killed:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    return proc.returncode, _read(out), killed


@pytest.fixture(scope="module")
def demo():
    if os.path.exists(JOURNAL):
        os.replace(JOURNAL, JOURNAL + ".before-test")
    proc = subprocess.run([os.path.join(ROOT, "scripts", "demo")], cwd=ROOT, env=_testbed.env(forks=None),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          timeout=1200, check=False)
    try:
        assert proc.returncode == 0, proc.stdout[-4000:]
        yield proc.stdout
    finally:
        if os.environ.get("GPUFLEET_KEEP_TESTBED") != "1":
            subprocess.run([os.path.join(ROOT, "scripts", "demo"), "--destroy"], cwd=ROOT,
                           env=_testbed.env(forks=None), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=600, check=False)


def test_the_demo_prints_no_warning_before_its_first_play(demo):
    head = demo.split("PLAY [", 1)[0]
    assert "Warning" not in head and "WARNING" not in head, head


def test_the_readme_tune_runs_on_the_demo_fleet_killed_twice_and_keeps_the_original(demo, tmp_path):
    import yaml  # pylint: disable=import-outside-toplevel

    before = dict((host, layout(server_info(host))) for host in HOSTS)
    assert set(before.values()) == {(1, 8, 1)}, before  # the demo's pp8
    argv = readme_command()
    example = yaml.safe_load(_read(os.path.join(ROOT, argv[argv.index("-e") + 1][1:])))
    budget = int(example["tune_budget"])
    units = len(HOSTS)

    # 1. keep=original, killed after the first round, resumed, killed after the next one
    rc1, out1, killed1 = run(argv + ["-e", "keep=original"], str(tmp_path / "run1.out"),
                             kill_at_trials=units)
    assert killed1, (rc1, out1[-3000:])
    after_kill = dict((host, layout(server_info(host))) for host in HOSTS)
    # the killed run left trial candidates running: no host serves what ran before
    # (strategies are measured first: tp8 and ep8, never the demo's pp8 first)
    assert all(after_kill[h] != before[h] for h in HOSTS), after_kill
    rc2, out2, killed2 = run(argv + ["-e", "keep=original"], str(tmp_path / "run2.out"),
                             kill_at_trials=2 * units)
    assert killed2, (rc2, out2[-3000:])
    starts_before_last = dict((host, len(starts(host))) for host in HOSTS)
    rc3, out3, _killed3 = run(argv + ["-e", "keep=original"], str(tmp_path / "run3.out"))
    assert rc3 == 0, out3[-4000:]

    done = trials()
    assert 2 * units < len(done) <= budget, [t["candidate"]["id"] for t in done]
    failed = [(t["candidate"]["id"], t.get("reason")) for t in done if t.get("status") != "ok"]
    assert failed == [], failed
    for line in done:  # measured by the default release's client, on its own host
        assert line["release"] == "0.5.23" and line["runs"], line["candidate"]["id"]
    # every host back on what it served before the first run, with the inventory's flags
    for host in HOSTS:
        assert layout(server_info(host)) == before[host], host
        last = starts(host)[-1]
        argv_last = last.get("argv") or []
        assert "--max-running-requests" not in argv_last, argv_last
        assert "--cuda-graph-max-bs-decode" not in argv_last, argv_last
        assert len(starts(host)) > starts_before_last[host], host
    assert "Winner" in out3 or "winner" in out3

    # 2. the README's command as written: nothing new measured, the winner everywhere
    trials_before = trials()
    rc4, out4, _killed4 = run(argv, str(tmp_path / "run4.out"))
    assert rc4 == 0, out4[-4000:]
    assert trials() == trials_before  # (it notes what ran before and what stays, no trial)
    reports = sorted(glob.glob(os.path.join(REPORTS, "tune-*.json")), key=os.path.getmtime)
    report = json.loads(_read(reports[-1]))
    winner = report["winner"]
    assert winner, report.get("rows")
    from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import parse_strategy  # pylint: disable=import-outside-toplevel
    want = parse_strategy(winner["strategy"])
    for host in HOSTS:
        info = server_info(host)
        assert (int(info["tp_size"]), int(info["pp_size"])) == (want["tp"], want["pp"]), (host, info)
