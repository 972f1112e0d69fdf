# -*- coding: utf-8 -*-
"""gpufleet.sglang.deploy_check through a real ansible-playbook run on the controller.

The server role's check entry point runs on two local hosts; the JSON callback gives the
registered result of each host.
"""

import copy
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
BIN = os.path.dirname(sys.executable)

INVENTORY = """
all:
  children:
    sglang_servers:
      children:
        pair:
          hosts:
            h1: {ansible_connection: local, sglang_node_address: 10.1.0.1}
            h2: {ansible_connection: local, sglang_node_address: 10.1.0.2}
    sglang_routers:
      hosts:
        r1: {ansible_connection: local}
"""

PLAYBOOK = """
- hosts: sglang_servers
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: gpufleet.sglang.server
        tasks_from: check
"""

GOOD = {"strategy": "ep8", "sglang_gpu_count": 8, "sglang_gpu_memory_mib": 97887,
        "sglang_release": "0.5.9", "sglang_model_path": "/models/k"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = tmp_path_factory.mktemp("deploy_check")
    (base / "hosts.yml").write_text(INVENTORY)
    (base / "play.yml").write_text(PLAYBOOK)

    seen = {}

    def _run(extra):
        """One ansible-playbook run per distinct input (the same input is not run twice)."""
        key = json.dumps(extra, sort_keys=True)
        if key not in seen:
            seen[key] = _play(extra)
        proc, results = seen[key]
        return proc, copy.deepcopy(results)

    def _play(extra):
        env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
                   ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
                   ANSIBLE_NOCOLOR="1")
        env.pop("ANSIBLE_CONFIG", None)
        proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(base / "hosts.yml"),
                               str(base / "play.yml"), "-e", json.dumps(extra)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              env=env, cwd=str(base), timeout=120, check=False)
        data = json.loads(proc.stdout)
        results = {}
        for play in data["plays"]:
            for task in play["tasks"]:
                if task["task"]["name"].endswith("Check the deploy inputs"):
                    results.update(task["hosts"])
        return proc, results
    return _run


def test_a_bare_inventory_is_refused_once_naming_every_required_input(run):
    proc, results = run({})
    assert proc.returncode != 0
    msg = results["h1"]["msg"]
    assert msg.startswith("h1: 2 problems with the deploy inputs:")
    for name in ("strategy", "sglang_model_repo"):
        assert "- %s is not set" % name in msg
    # the release defaults to the newest tested one
    assert "sglang_release" not in msg
    # the GPUs are read on the host: their variables are not required
    assert "sglang_gpu_count" not in msg and "sglang_gpu_memory_mib" not in msg
    assert "Error while resolving" not in proc.stdout and "Finalization" not in proc.stdout


WITHOUT_GPUS = dict((k, v) for k, v in GOOD.items() if not k.startswith("sglang_gpu_"))


def test_without_gpu_variables_the_layout_is_left_to_the_host(run):
    proc, results = run(dict(WITHOUT_GPUS, strategy="tp4"))
    assert proc.returncode == 0, proc.stdout[-2000:]
    res = results["h1"]
    assert res["layout"] == {"name": "tp4", "tp": 4, "pp": 1, "ep": 1, "dp": 1, "nnodes": 1, "gpus": 4}
    assert res["layout_checked"] is False and res["strategy"] == "tp4"
    assert res["gpus"] == {"count": None, "memory_mib": None}


def test_a_given_gpu_count_still_checks_the_layout_on_the_controller(run):
    # a strategy that does not fit the count given is the host's to judge: the host compares
    # the count with its GPUs first ("sglang_gpu_count is 8, but h1 has 4 GPUs (...)"), then
    # fits the strategy with these words (issue 42: the controller named only the count)
    proc, results = run(dict(GOOD, strategy="tp4"))
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert results["h1"]["layout_checked"] is False
    assert results["h1"]["layout"]["gpus"] == 4 and results["h1"]["gpus"]["count"] == 8
    assert results["h1"]["deferred"].startswith(
        "strategy 'tp4' needs tp*pp = 4*1 = 4 GPUs, but the server has 8")
    # the grammar is still the controller's
    proc, results = run(dict(GOOD, strategy="tp4-ep3"))
    assert proc.returncode != 0 and "ep 3 does not divide tp 4" in results["h1"]["msg"]
    proc, results = run(GOOD)
    assert results["h1"]["layout_checked"] is True
    assert results["h1"]["gpus"] == {"count": 8, "memory_mib": 97887}


@pytest.mark.parametrize("changes, expect", [
    ({"sglang_gpu_count": "eight"}, 'h1: sglang_gpu_count must be a positive integer (got "eight"), e.g. 8'),
    ({"sglang_gpu_memory_mib": "lots"},
     'h1: sglang_gpu_memory_mib must be a positive integer (got "lots"), e.g. 97887'),
])
def test_a_malformed_gpu_variable_is_still_refused(run, changes, expect):
    proc, results = run(dict(WITHOUT_GPUS, **changes))
    assert proc.returncode != 0
    assert results["h1"]["msg"] == expect


def test_without_a_gpu_count_grammar_and_divisibility_are_still_checked(run):
    proc, results = run(dict(WITHOUT_GPUS, strategy="tp8-ep3"))
    assert proc.returncode != 0
    assert "ep 3 does not divide tp 8" in results["h1"]["msg"]


def test_good_inputs_give_the_layout(run):
    proc, results = run(GOOD)
    assert proc.returncode == 0, proc.stdout[-2000:]
    layout = results["h2"]["layout"]
    assert (layout["name"], layout["tp"], layout["ep"]) == ("ep8", 8, 8)
    assert results["h2"]["topology"]["members"] == ["h2"]


def test_a_strategy_error_is_the_collections_own_text(run):
    proc, results = run(dict(GOOD, strategy="tp8-ep16"))
    assert proc.returncode != 0
    assert results["h1"]["msg"] == ("h1: strategy 'tp8-ep16': ep 16 does not divide tp 8 (SGLang "
                                    "runs expert parallelism inside the tensor-parallel group)")


def test_two_hosts_form_one_server(run):
    proc, results = run(dict(GOOD, strategy="tp16", sglang_nnodes=2, sglang_server_group="pair"))
    assert proc.returncode == 0, proc.stdout[-2000:]
    one, two = results["h1"]["topology"], results["h2"]["topology"]
    assert (one["node_rank"], two["node_rank"]) == (0, 1)
    assert one["dist_init_addr"] == two["dist_init_addr"] == "10.1.0.1:50000"
    assert one["serves_http"] and not two["serves_http"]


def test_a_group_without_rank_0_is_refused(run):
    proc, results = run(dict(GOOD, strategy="tp16", sglang_nnodes=2, sglang_server_group="pair",
                             sglang_node_rank=1))
    assert proc.returncode != 0
    assert "no host has rank 0" in results["h1"]["msg"]


def test_a_server_whose_hosts_would_restart_in_different_batches_is_refused(run):
    proc, results = run(dict(GOOD, strategy="tp16", sglang_nnodes=2, sglang_server_group="pair",
                             sglang_rollout_batch=1))
    assert proc.returncode != 0
    assert "would restart in different rollout batches" in results["h1"]["msg"]
    proc, results = run(dict(GOOD, strategy="tp16", sglang_nnodes=2, sglang_server_group="pair",
                             sglang_rollout_batch=2))
    assert proc.returncode == 0, proc.stdout[-2000:]


@pytest.mark.parametrize("server_key, router_key, refused", [
    ("sk-own", "rk-router", True),    # smg forwards rk-router; the server wants sk-own
    ("rk-router", "rk-router", False),  # the shared key
    ("sk-own", "", False),            # a router without a key calls the server with its key
    ("", "rk-router", False),         # an open server behind a keyed router
])
def test_a_server_key_the_routers_would_not_forward_is_refused(run, server_key, router_key, refused):
    proc, results = run(dict(GOOD, server_api_key=server_key, router_api_key=router_key))
    assert (proc.returncode != 0) is refused, proc.stdout[-2000:]
    if refused:
        msg = results["h1"]["msg"]
        assert "server_api_key differs from router_api_key of r1" in msg
        assert "sk-own" not in msg and "rk-router" not in msg


# --- prefill/decode (PD) layouts ----------------------------------------------------------

PD_NOT_DEPLOYED = ("prefill/decode layouts are checked, not deployed yet: prepare, the rollout and the "
                   "router do not render the PD servers and the router's PD mode (issue 43); no host "
                   "was changed")


def test_a_pd_layout_places_its_roles_on_the_play_hosts_and_stops_before_any_host(run):
    proc, results = run(dict(GOOD, strategy="prefill:ep8+decode:ep8"))
    # until prepare, the rollout and the router deploy PD, a clean PD check is refused with
    # that one reason alone
    assert proc.returncode != 0
    for host, role in (("h1", "prefill"), ("h2", "decode")):
        res = results[host]
        assert res["msg"] == "%s: %s" % (host, PD_NOT_DEPLOYED)
        pd = res["pd"]
        assert pd["layout"] == "prefill:ep8+decode:ep8" and pd["release"] == "0.5.9"
        assert [(p["role"], p["server"], p["base_gpu_id"], p["gpus"]) for p in pd["placements"]] == [
            (role, role + "-0", 0, 8)]
        assert pd["release_facts"]["backends"] == ["mooncake", "nixl", "ascend", "fake", "mori"]


def test_every_pd_problem_of_the_fleet_at_once(run):
    proc, results = run(dict(GOOD, strategy="prefill:ep8+decode:ep8", sglang_pd_transfer_backend="mooncake_tcp",
                             sglang_pd_role="prefill", router_package="sglang-router", router_version="0.2.1",
                             server_extra_args={"--disaggregation-ib-device": "mlx5_0"}))
    assert proc.returncode != 0
    msg = results["h1"]["msg"]
    assert msg.startswith("h1: 6 problems with the deploy inputs:\n")
    for expect in ("- server_extra_args --disaggregation-ib-device: \"mlx5_0\": the PD layout",
                   "- sglang_pd_transfer_backend is mooncake_tcp, but sglang 0.5.9 has no such transfer backend",
                   "- router r1 runs router_package sglang-router 0.2.1, which the collection cannot run in PD mode",
                   "- h2 is pinned to prefill by sglang_pd_role, but prefill:ep8+decode:ep8 has 1 prefill server, "
                   "already placed on h1 (pinned too)",
                   "1 decode server finds no place: add hosts to the server group or lower the count; "
                   "pinned: h1 to prefill, h2 to prefill",
                   "- " + PD_NOT_DEPLOYED):
        assert expect in msg


def test_pd_flags_outside_a_pd_layout_are_refused_in_the_check(run):
    proc, results = run(dict(GOOD, server_extra_args={"--disaggregation-mode": "prefill"}))
    assert proc.returncode != 0
    assert results["h1"]["msg"].startswith(
        'h1: server_extra_args --disaggregation-mode: "prefill" is a prefill/decode (PD) flag, and strategy '
        '"ep8" is no PD layout')
    assert "pd" not in results["h1"]


def test_a_role_pinned_outside_a_pd_layout_is_refused(run):
    """The router role reads the pins: under a co-located strategy it would route in PD mode
    to co-located servers. The same pin under a PD layout is no problem of its own."""
    proc, results = run(dict(GOOD, sglang_pd_role="prefill"))
    assert proc.returncode != 0
    for host in ("h1", "h2"):
        assert results[host]["msg"] == (
            '%s: sglang_pd_role pins the role prefill on %s, but strategy "ep8" is no '
            'prefill/decode layout: the router would route in PD mode to co-located servers; '
            'use a PD layout (prefill:ep8+decode:2xep8) or remove the pin' % (host, host))
    proc, results = run(dict(GOOD, strategy="prefill:ep8+decode:ep8", sglang_pd_role=["prefill", "decode"]))
    assert "no prefill/decode layout" not in results["h1"]["msg"]
