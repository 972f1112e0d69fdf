# -*- coding: utf-8 -*-
"""The PD reachability check's pure parts: which ports a host connects to and listens on,
the problem lines, and the KV port drawn from the kernel's ephemeral range."""

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _pd_roles
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import parse_pd
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _pd_reach as reach

R1, R2, R3 = "gpufleet-router-1", "gpufleet-router-2", "gpufleet-router-3"
HOSTS = {R1: {"address": "10.88.0.5", "kv_port": 41001},
         R2: {"address": "10.88.0.6", "kv_port": 41002},
         R3: {"address": "10.88.0.7", "kv_port": 41003}}


def plan(layout, hosts=(R1, R2, R3), gpus=8, multinode=None):
    found, problems = _pd_roles.fleet_plan(parse_pd(layout), list(hosts), multinode, gpus)
    assert problems == []
    return found


def brief(found):
    """(what, peer host, port, peer servers, my servers) of each target."""
    return [(t["what"], t["host"], t["port"], t["servers"], t["from"]) for t in found]


# --- targets ---------------------------------------------------------------------------

def test_a_decode_with_two_prefills_connects_to_both_bootstrap_and_kv_ports():
    servers = plan("prefill:2xep8+decode:ep8")["servers"]
    assert brief(reach.targets(R3, servers, HOSTS)) == [
        ("bootstrap", R1, 8998, ["prefill-0"], ["decode-0"]),
        ("kv", R1, 41001, ["prefill-0"], ["decode-0"]),
        ("bootstrap", R2, 8998, ["prefill-1"], ["decode-0"]),
        ("kv", R2, 41002, ["prefill-1"], ["decode-0"])]
    # control: a prefill connects to the decode host's KV port only, never to a prefill
    assert brief(reach.targets(R1, servers, HOSTS)) == [("kv", R3, 41003, ["decode-0"], ["prefill-0"])]


def test_a_prefill_with_two_decodes_connects_to_each_decode_kv_port():
    servers = plan("prefill:ep8+decode:2xep8")["servers"]
    found = reach.targets(R1, servers, HOSTS)
    assert brief(found) == [("kv", R2, 41002, ["decode-0"], ["prefill-0"]),
                            ("kv", R3, 41003, ["decode-1"], ["prefill-0"])]
    assert [(t["address"], t["role"]) for t in found] == [("10.88.0.6", "decode"), ("10.88.0.7", "decode")]
    # control: a decode does not connect to the other decode
    assert [t["host"] for t in reach.targets(R2, servers, HOSTS)] == [R1, R1]


def test_the_address_is_the_hosts_and_the_whole_plan_is_taken_too():
    found = plan("prefill:ep8+decode:ep8", hosts=(R1, R2))
    assert reach.targets(R2, found, HOSTS) == reach.targets(R2, found["servers"], HOSTS)
    assert [(t["address"], t["port"]) for t in reach.targets(R2, found, HOSTS)] == [
        ("10.88.0.5", 8998), ("10.88.0.5", 41001)]


def test_a_multi_node_prefill_has_its_bootstrap_on_its_first_host_and_kv_on_each():
    servers = plan("prefill:tp16+decode:ep8", multinode={"p": [R1, R2]})["servers"]
    assert brief(reach.targets(R3, servers, HOSTS)) == [
        ("bootstrap", R1, 8998, ["prefill-0"], ["decode-0"]),
        ("kv", R1, 41001, ["prefill-0"], ["decode-0"]),
        ("kv", R2, 41002, ["prefill-0"], ["decode-0"])]
    # control: each host of the prefill server connects to the decode
    assert [t["host"] for t in reach.targets(R2, servers, HOSTS)] == [R3]


def test_a_shared_host_gets_a_bootstrap_port_per_slot_and_reaches_itself():
    # one host of 8 GPUs: prefill-0 on GPUs 0-3 (slot 0), decode-0 on 4-7 (slot 1)
    servers = plan("prefill:tp4+decode:tp4", hosts=(R1,))["servers"]
    assert brief(reach.targets(R1, servers, HOSTS)) == [
        ("bootstrap", R1, 8998, ["prefill-0"], ["decode-0"]),
        ("kv", R1, 41001, ["prefill-0"], ["decode-0"]),
        ("kv", R1, 41001, ["decode-0"], ["prefill-0"])]
    # two prefills on one host: slot 1's bootstrap port is one step up
    two = plan("prefill:2xtp4+decode:ep8", hosts=(R1, R2))["servers"]
    ports = [(t["servers"], t["port"]) for t in reach.targets(R2, two, HOSTS) if t["what"] == "bootstrap"]
    assert ports == [(["prefill-0"], 8998), (["prefill-1"], 9008)]
    assert [(t["servers"], t["port"]) for t in reach.targets(R2, two, HOSTS, bootstrap_port=7000, step=1)
            if t["what"] == "bootstrap"] == [(["prefill-0"], 7000), (["prefill-1"], 7001)]


def test_a_placement_that_carries_its_bootstrap_port_keeps_it():
    servers = [dict(s) for s in plan("prefill:ep8+decode:ep8", hosts=(R1, R2))["servers"]]
    servers[0]["bootstrap_port"] = 9100
    assert reach.targets(R2, servers, HOSTS)[0]["port"] == 9100
    # control: without it, the default
    assert reach.targets(R2, plan("prefill:ep8+decode:ep8", hosts=(R1, R2))["servers"], HOSTS)[0]["port"] == 8998


def test_a_host_outside_the_layout_connects_to_nothing_and_listens_on_nothing():
    servers = plan("prefill:ep8+decode:ep8", hosts=(R1, R2))["servers"]
    assert reach.targets(R3, servers, HOSTS) == []
    assert reach.listen_ports(R3, servers, HOSTS, 8998) == []
    # control: a host of the layout has targets
    assert reach.targets(R2, servers, HOSTS) != []


@pytest.mark.parametrize("hosts, named", [
    ({R2: {"address": "10.88.0.6", "kv_port": 41002}}, ["gpufleet-router-1 has no address", "gpufleet-router-1 has no kv_port"]),
    ({R1: {"address": "10.88.0.5"}, R2: HOSTS[R2]}, ["gpufleet-router-1 has no kv_port"]),
    ({R1: {"address": "", "kv_port": "x"}, R2: HOSTS[R2]}, ["gpufleet-router-1 has no address", "got 'x'"]),
])
def test_missing_addresses_and_kv_ports_are_named_at_once(hosts, named):
    servers = plan("prefill:ep8+decode:ep8", hosts=(R1, R2))["servers"]
    with pytest.raises(ValueError) as exc:
        reach.targets(R2, servers, hosts)
    for text in named:
        assert text in str(exc.value)
    # control: with every host known, no error
    assert reach.targets(R2, servers, HOSTS)


def test_a_placement_that_is_no_server_is_refused():
    with pytest.raises(ValueError, match="prefill|decode"):
        reach.targets(R1, [{"name": "x-0", "role": "router", "hosts": [R1]}], HOSTS)


# --- listen_ports ----------------------------------------------------------------------

def test_a_prefill_host_listens_on_its_bootstrap_and_kv_ports():
    servers = plan("prefill:ep8+decode:2xep8")["servers"]
    assert reach.listen_ports(R1, servers, HOSTS, 8998) == [
        {"port": 8998, "what": "bootstrap", "servers": ["prefill-0"]},
        {"port": 41001, "what": "kv", "servers": ["prefill-0"]}]
    # control: a decode host listens on its KV port only
    assert reach.listen_ports(R2, servers, HOSTS, 8998) == [{"port": 41002, "what": "kv", "servers": ["decode-0"]}]


def test_a_bootstrap_port_a_running_server_answers_is_left_out():
    servers = plan("prefill:ep8+decode:2xep8")["servers"]
    assert reach.listen_ports(R1, servers, HOSTS, 8998, answering=[8998]) == [
        {"port": 41001, "what": "kv", "servers": ["prefill-0"]}]
    # control: another port answering changes nothing
    assert len(reach.listen_ports(R1, servers, HOSTS, 8998, answering=[9999])) == 2


def test_only_the_first_host_of_a_multi_node_prefill_listens_on_the_bootstrap_port():
    servers = plan("prefill:tp16+decode:ep8", multinode={"p": [R1, R2]})["servers"]
    assert [e["what"] for e in reach.listen_ports(R1, servers, HOSTS, 8998)] == ["bootstrap", "kv"]
    assert [e["what"] for e in reach.listen_ports(R2, servers, HOSTS, 8998)] == ["kv"]


def test_a_shared_host_listens_on_each_prefill_slot_and_one_kv_port():
    servers = plan("prefill:2xtp4+decode:ep8", hosts=(R1, R2))["servers"]
    assert reach.listen_ports(R1, servers, HOSTS, 8998) == [
        {"port": 8998, "what": "bootstrap", "servers": ["prefill-0"]},
        {"port": 9008, "what": "bootstrap", "servers": ["prefill-1"]},
        {"port": 41001, "what": "kv", "servers": ["prefill-0", "prefill-1"]}]


def test_listen_ports_needs_the_hosts_kv_port():
    servers = plan("prefill:ep8+decode:ep8", hosts=(R1, R2))["servers"]
    with pytest.raises(ValueError, match="gpufleet-router-2 has no kv_port"):
        reach.listen_ports(R2, servers, {R2: {"address": "10.88.0.6"}}, 8998)


# --- verdict and probe_error -----------------------------------------------------------

def result(ok, error=None, **extra):
    base = {"host": R1, "role": "prefill", "servers": ["prefill-0"], "address": "10.88.0.5", "port": 8998,
            "what": "bootstrap", "from": ["decode-0"], "ok": ok, "error": error, "elapsed": 3.0}
    base.update(extra)
    return base


def test_a_timed_out_bootstrap_port_is_one_line_naming_both_ends():
    assert reach.verdict(R2, [result(False, reach.probe_error(False, 3.0, 3))]) == [
        "gpufleet-router-2 (decode-0) cannot reach gpufleet-router-1 (prefill-0) at 10.88.0.5:8998, "
        "the bootstrap port: timed out after 3 s"]
    # control: a port that answered is no problem
    assert reach.verdict(R2, [result(True)]) == []


def test_every_failed_port_is_named_and_ipv6_addresses_are_bracketed():
    results = [result(False, "timed out after 3 s"),
               result(False, "refused", what="kv", port=41001, address="fd00::5"),
               result(True, what="kv", host=R3, port=41003)]
    assert reach.verdict(R2, results) == [
        "gpufleet-router-2 (decode-0) cannot reach gpufleet-router-1 (prefill-0) at 10.88.0.5:8998, "
        "the bootstrap port: timed out after 3 s",
        "gpufleet-router-2 (decode-0) cannot reach gpufleet-router-1 (prefill-0) at [fd00::5]:41001, "
        "the KV port: refused"]


@pytest.mark.parametrize("ok, elapsed, timeout, text", [
    (True, 0.01, 3, None),
    (False, 3.0, 3, "timed out after 3 s"),
    (False, 2.95, 3, "timed out after 3 s"),
    (False, 0.5, 0.5, "timed out after 0.5 s"),
    (False, 0.004, 3, "refused or unreachable after 0 s"),
    (False, 0.25, 3, "refused or unreachable after 0.25 s"),
])
def test_probe_error_tells_a_timeout_from_a_refusal(ok, elapsed, timeout, text):
    found = reach.probe_error(ok, elapsed, timeout)
    assert found == text if text is None else found.startswith(text)


def test_connect_probes_each_address_and_port_once():
    calls = []

    def probe(address, port, timeout):
        calls.append((address, port, timeout))
        return port != 41001

    found = [result(None, what="bootstrap"), result(None, what="kv", port=41001),
             result(None, what="kv", port=41001, role="decode", servers=["decode-1"], **{"from": ["prefill-1"]})]
    results = reach.connect(found, 3, probe=probe)
    assert sorted(calls) == [("10.88.0.5", 8998, 3), ("10.88.0.5", 41001, 3)]
    assert [(r["ok"], r["error"] is None) for r in results] == [(True, True), (False, False), (False, False)]
    assert reach.connect([], 3, probe=probe) == []


# --- kv_port ---------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["32768\t60999", "32768 60999\n", "1024  65535"])
def test_the_kv_port_lies_in_the_range_and_is_the_same_every_time(text):
    low, high = reach.parse_port_range(text)
    port = reach.kv_port(text, R1)
    assert low <= port <= high
    assert reach.kv_port(text, R1) == port
    # control: another host draws another port (these names do not collide)
    assert reach.kv_port(text, R2) != port


def test_a_one_port_range_gives_that_port_and_avoid_moves_on():
    assert reach.kv_port("40000 40000", R1) == 40000
    port = reach.kv_port("32768\t60999", R1)
    nxt = reach.kv_port("32768\t60999", R1, avoid=[port])
    assert nxt != port and 32768 <= nxt <= 60999
    with pytest.raises(ValueError, match="every port"):
        reach.kv_port("40000 40000", R1, avoid=[40000])


@pytest.mark.parametrize("text", ["", "32768", "a b", "60999 32768", "0 100", "1 70000"])
def test_a_range_that_is_no_range_is_refused(text):
    with pytest.raises(ValueError):
        reach.kv_port(text, R1)
