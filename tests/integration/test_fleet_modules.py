# -*- coding: utf-8 -*-
"""The collection's modules against the test-bed hosts, through pytest-ansible's host
fixture ``ansible_adhoc`` (the molecule deploy fleet: gpufleet-mol-1..3, SSH on
127.0.0.1:22301-22303, inventory ``extensions/molecule/inventory``).

``tests/conftest.py`` runs these right after the molecule deploy scenario, which keeps its
fleet (``tests/stages/test_molecule.py``). Run alone, the module fixture brings the fleet up
itself (``molecule converge -s deploy``). Either way it is destroyed at the end.

Runs only with GPUFLEET_INTEGRATION=1.
"""

import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.sglang.tests.ports import port_open

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
INVENTORY = os.path.join(ROOT, "extensions", "molecule", "inventory")
HOSTS = ("gpufleet-mol-1", "gpufleet-mol-2", "gpufleet-mol-3")
HTTP_PORTS = (39101, 39102, 39103)
BIN = os.path.dirname(sys.executable)
RELEASE = "0.5.9"

pytestmark = [
    pytest.mark.integration,
    # pytest-ansible 26.x announces its end of life (December 2026) on every use
    pytest.mark.filterwarnings("ignore:Host management is deprecated:DeprecationWarning"),
    pytest.mark.skipif(os.environ.get("GPUFLEET_INTEGRATION") != "1",
                       reason="set GPUFLEET_INTEGRATION=1 to run the integration tests"),
]


def _molecule(*args):
    env = dict(os.environ, PATH="%s:%s" % (BIN, os.environ.get("PATH", "")))
    res = subprocess.run([sys.executable, "-m", "molecule"] + list(args) + ["-s", "deploy"],
                         cwd=ROOT, env=env, check=False)
    assert res.returncode == 0, "molecule %s -s deploy exited %d" % (" ".join(args), res.returncode)


def _serving(port):
    return port_open("127.0.0.1", port, timeout=1)


@pytest.fixture(scope="module")
def fleet_up():
    """The deploy fleet, brought up when it is not; destroyed at the end (unless
    GPUFLEET_KEEP_FLEET=1, to look at it afterwards)."""
    if not all(_serving(p) for p in HTTP_PORTS):
        _molecule("converge")
    yield
    if os.environ.get("GPUFLEET_KEEP_FLEET") != "1":
        _molecule("destroy")


@pytest.fixture
def fleet(fleet_up, ansible_adhoc):  # pylint: disable=unused-argument,redefined-outer-name
    """pytest-ansible's HostManager for the deploy fleet."""
    return ansible_adhoc(inventory=INVENTORY, host_pattern="sglang_servers", become=False)


def _run(hosts, pattern, module, **args):
    """Run ``module`` on the hosts matching ``pattern``; {host: result}."""
    results = getattr(hosts[pattern], module)(**args)
    return {name: results[name] for name in results.contacted}


def test_each_host_reports_a_healthy_deployed_server(fleet):
    rows = _run(fleet, "sglang_servers", "gpufleet.sglang.server_status", name="x")
    assert sorted(rows) == list(HOSTS)
    for host, res in rows.items():
        row = res["row"]
        assert not res.is_failed, (host, res)
        assert row["healthy"] and row["ready"] and not row["drifted"], (host, row)
        assert row["release"] == RELEASE and row["active_state"] == "active", (host, row)
        assert row["main_pid"] > 1


def test_the_doctor_reads_the_stand_in_gpus(fleet):
    rows = _run(fleet, HOSTS[0], "gpufleet.sglang.gpu_prereqs",
                python="/opt/sglang/%s/bin/python" % RELEASE,
                waive=["cuda_toolkit", "cuda_headers"], fail_on_error=False)
    res = rows[HOSTS[0]]
    assert len(res["gpus"]) == 8, res.get("gpus")
    assert all("RTX PRO 6000" in g["name"] for g in res["gpus"])
    assert res["nvidia_smi"]["status"] == "ok"


def test_health_of_a_serving_server_is_ready(fleet):
    rows = _run(fleet, HOSTS[1], "gpufleet.sglang.server_health", url="http://127.0.0.1:30000",
                release=RELEASE, unit="sglang.service", timeout=30, interval=0.5,
                progress_every=5)
    res = rows[HOSTS[1]]
    assert not res.is_failed, res
    assert res["ready"] is True and res["phase"] == "ready"
    # the journal of the running start: it went through the load phases, in order
    assert [p["phase"] for p in res["phases"]][:2] == ["starting", "loading"]
    assert res["shards"] == {"done": 64, "total": 64, "percent": 100}


def test_health_of_a_port_nobody_serves_names_the_phase(fleet):
    rows = _run(fleet, HOSTS[2], "gpufleet.sglang.server_health", url="http://127.0.0.1:30999",
                release=RELEASE, timeout=2, interval=0.5)
    res = rows[HOSTS[2]]
    assert res.is_failed
    assert "port 30999 never opened; it was starting (port not open yet)" in res["msg"]


def test_plan_playbook_reads_the_gpus_of_a_plain_inventory(fleet):
    """playbooks/plan.yml on the fleet's inventory, which sets no GPU variables."""
    env = dict(os.environ, PATH="%s:%s" % (BIN, os.environ.get("PATH", "")),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    res = subprocess.run([os.path.join(BIN, "ansible-playbook"), "playbooks/plan.yml",
                          "-i", INVENTORY, "-l", HOSTS[0], "-e", "strategies=pp8,ep8"],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "== group sglang_servers: 8 x 97887 MiB (NVIDIA RTX PRO 6000" in res.stdout, res.stdout[-3000:]
    assert "WARNING" not in res.stdout + res.stderr
