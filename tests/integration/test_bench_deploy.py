# -*- coding: utf-8 -*-
"""scripts/bench-deploy runs, at its smallest (``--hosts 2 --rounds 1``), so that it cannot
rot again: its own fleet (gpufleet-bench-1..2, HTTP 39401-39402, SSH 22501-22502) is
created, deployed, benchmarked and destroyed. Nothing about times is asserted or reported;
what a no-op must not do is: it restarts no server and runs no pip."""

import json
import os
import subprocess
import sys

import _testbed

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

pytestmark = _testbed.MARKS


def test_bench_deploy_runs_at_its_smallest(tmp_path):
    out = str(tmp_path / "bench.json")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench-deploy"),
                           "--hosts", "2", "--rounds", "1", "--json", out],
                          cwd=ROOT, env=_testbed.env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=1800,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    with open(out, encoding="utf-8") as handle:
        result = json.load(handle)
    summary = result["summary"]
    assert summary["hosts"] == 2 and summary["noop_runs_observed"] == 2, summary
    assert summary["noop_restarts_total"] == 0, summary
    assert summary["noop_pip_runs_total"] == 0, summary
    # a switch restarts every host's server once
    assert summary["switch_restarts"] == [2], summary
    assert "| hosts | no-op wall (med)" in proc.stdout
