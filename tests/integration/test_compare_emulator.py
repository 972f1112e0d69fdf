# -*- coding: utf-8 -*-
"""Integration: benchmark four SGLang emulators (one per strategy) with the benchmark role
and aiperf, compare them, and check the winner, the measured rates and the report files.

Runs only with GPUFLEET_INTEGRATION=1 (about 3 minutes on 2 cores). aiperf comes from
GPUFLEET_AIPERF_VENV when set, else the role installs it into its default venv on the
controller (needs the package index).
"""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils._bench import png_size

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.environ.get("GPUFLEET_INTEGRATION") != "1",
                       reason="set GPUFLEET_INTEGRATION=1 to run the integration tests"),
]

# strategy -> launch_server layout flags
STRATEGIES = {
    "tp8": ["--tp-size", "8"],
    "pp8": ["--tp-size", "1", "--pp-size", "8"],
    "ep8": ["--tp-size", "8", "--ep-size", "8"],
    "ep4": ["--tp-size", "8", "--ep-size", "4"],
}


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url, timeout=2.0):
    import requests
    return requests.get(url, timeout=timeout).json()


@pytest.fixture(scope="module")
def emulators(tmp_path_factory):
    base = tmp_path_factory.mktemp("emulators")
    model = base / "model"
    model.mkdir()
    procs, servers = [], {}
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tests", "emulator", "src"),
               SGLANG_EMULATOR_LOAD_SECONDS="0.5", SGLANG_EMULATOR_WARMUP_SECONDS="0.5")
    env.pop("SGLANG_EMULATOR_RATES", None)
    try:
        for name, layout in STRATEGIES.items():
            port = free_port()
            state = base / ("state-" + name)
            state.mkdir()
            log = open(str(base / (name + ".log")), "w")
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model),
                 "--host", "127.0.0.1", "--port", str(port)] + layout,
                env=dict(env, SGLANG_EMULATOR_STATE_DIR=str(state)), stdout=log,
                stderr=subprocess.STDOUT))
            servers[name] = "http://127.0.0.1:%d" % port
        deadline = time.monotonic() + 60
        for name, url in servers.items():
            while True:
                try:
                    import requests
                    if requests.get(url + "/health", timeout=1).status_code == 200:
                        break
                except Exception:  # pylint: disable=broad-except
                    pass
                assert time.monotonic() < deadline, "emulator %s did not come up" % name
                time.sleep(0.2)
        yield servers
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_compare_four_strategies_with_aiperf(emulators, tmp_path):
    reports = tmp_path / "reports"
    hosts = {}
    for name, url in emulators.items():
        hosts["emu-" + name] = {"sglang_strategy": name, "benchmark_url": url}
    inventory = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "sglang_release": "0.5.23",
                "sglang_model_path": "/nonexistent",
                "benchmark_tool": "aiperf",
                "benchmark_concurrency": [1, 16, 64],
                "benchmark_input_len": 32,
                "benchmark_output_len": 64,
                "benchmark_single_requests": 4,
                "benchmark_requests_per_slot": 1,
                "benchmark_min_requests": 8,
                "benchmark_warmup_requests": 0,
                # one worker process: on 2 cores aiperf measures more with fewer processes
                "benchmark_aiperf_workers_max": 1,
                "benchmark_write_fact": False,
                "benchmark_reports_dir": str(reports),
            },
            "children": {"emulators": {"hosts": hosts}},
        }
    }
    if os.environ.get("GPUFLEET_AIPERF_VENV"):
        inventory["all"]["vars"]["benchmark_aiperf_venv"] = os.environ["GPUFLEET_AIPERF_VENV"]
    inv = tmp_path / "inventory.json"
    inv.write_text(json.dumps(inventory))
    env = dict(os.environ,
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_FORCE_COLOR="0")
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    started = time.monotonic()
    proc = subprocess.run([playbook, "-i", str(inv), os.path.join(HERE, "compare_emulator.yml")],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=600, check=False)
    took = time.monotonic() - started
    print(proc.stdout[-6000:])
    assert proc.returncode == 0, proc.stdout[-4000:]

    report = json.loads((reports / "compare-integration.json").read_text())
    md = (reports / "compare-integration.md").read_text()
    png = (reports / "compare-integration.png").read_bytes()
    print(md)
    print("playbook took %.0f s" % took)

    assert report["winner"] == "ep8"
    rows = dict((r["strategy"], r) for r in report["strategies"])
    assert set(rows) == set(STRATEGIES)
    for name, url in emulators.items():
        rates = get_json(url + "/server_info")["emulator_rates"]
        row = rows[name]
        assert row["status"] == "ok"
        # the single-request decode rate the emulator is configured with, within 5 %
        assert row["single_tok_s"] == pytest.approx(rates["single"], rel=0.05), name
        # aggregate throughput never beats the configured ceiling (5 % measuring slack)
        assert row["peak_tok_s"] <= rates["ceiling"] * 1.05, name
        assert sorted(int(c) for c in row["aggregate_tok_s"]) == [1, 16, 64]
    assert "Winner (throughput): **ep8**" in md
    width, height = png_size(png)
    assert width >= 400 and height >= 300
    for name in STRATEGIES:
        per_host = json.loads((reports / ("bench-emu-%s-%s.json" % (name, name))).read_text())
        assert [r["concurrency"] for r in per_host] == [1, 16, 64]
        assert all(r["tool"] == "aiperf" and r["completed"] == r["num_prompts"] for r in per_host)
