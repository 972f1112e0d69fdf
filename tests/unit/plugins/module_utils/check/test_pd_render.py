# -*- coding: utf-8 -*-
"""One decision per PD host (``_pd.render``): the transfer backend chosen once over every PD
host's transport facts, and each of the host's servers by slot - names, ports, the role's
flags (parsed by each release's real argparse, rebuilt from its actions.json) and the unit's
environment - with every refusal at once. The cases are data; each has its control."""

import json
import os

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _pd
from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _pd_roles
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import parse_pd
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._gpu_parse import parse_topology_nics
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_help import parse_help
from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES, SGLANG_HELP
from ansible_collections.gpufleet.sglang.tests.unit.plugins.module_utils.prepare import rebuild_sglang_help


def help_facts(release):
    with open(os.path.join(SGLANG_HELP, "sglang-%s.txt" % release)) as handle:
        return _pd.facts_from_help(parse_help(handle.read())["flags"])


def parse_with_release(release, flags):
    """``--model-path /m`` and the slot's flags through the release's real parser (exact
    option strings only)."""
    with open(os.path.join(SGLANG_HELP, "argparse", "sglang-%s.actions.json" % release)) as handle:
        actions = json.load(handle)["actions"]
    return rebuild_sglang_help.strict_parse(actions, flags)


with open(os.path.join(FIXTURES, "nvidia-smi", "h200-x8-topo.txt")) as _handle:
    # through JSON, as hostvars hold it (the GPU keys of each NIC's links become strings)
    H200 = json.loads(json.dumps(parse_topology_nics(_handle.read())))

TEN = ["mlx5_%d" % i for i in range(10)]
RDMA = {"ib_devices": [{"name": d, "state": "ACTIVE"} for d in TEN], "peermem": True, "topology": H200}
NO_RDMA = {"ib_devices": [], "peermem": False, "topology": H200}
NO_GDR = {"ib_devices": ["mlx5_0"], "peermem": False, "topology": H200}
#: The h200 matrix's nearest RDMA devices per GPU (test_pd.py reads the same cells).
NEAREST = {"0": "mlx5_3", "1": "mlx5_5", "2": "mlx5_4", "3": "mlx5_0,mlx5_1,mlx5_2",
           "4": "mlx5_7", "5": "mlx5_9", "6": "mlx5_8", "7": "mlx5_6"}
ORDER = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def placements(layout, hosts, gpus=8):
    plan, problems = _pd_roles.fleet_plan(parse_pd(layout), hosts, None, gpus)
    assert problems == []
    return plan["hosts"]


def render(case):
    c = dict({"release": "0.5.23", "facts": "help", "gpus": 8, "server_port": 30000,
              "bootstrap_port": _pd.DEFAULT_BOOTSTRAP_PORT, "forced": None, "ib_device": None}, **case)
    hosts = list(c["hosts"])
    facts = help_facts(c["release"]) if c["facts"] == "help" else c["facts"]
    plan = placements(c["layout"], hosts, c["gpus"])
    return _pd.render(c["layout"], c["release"], facts, c["hosts"], c["host"], plan[c["host"]],
                      c["server_port"], c["bootstrap_port"], c["forced"], c["ib_device"])


def pairs(flags):
    return dict((f, v) for f, v in flags)


# Each case: the inputs, and what the result must hold (``slots``: each listed slot's keys,
# ``flags``: each listed slot's flags as a mapping, ``absent``: flags a slot must not have,
# ``reason``/``problems``: text each must contain).
CASES = [
    ("1P1D, RDMA and GPUDirect on both hosts: mooncake, each GPU its nearest devices",
     {"layout": "prefill:ep8+decode:ep8", "hosts": {"p1": RDMA, "d1": RDMA}, "host": "p1"},
     {"backend": "mooncake", "reason": "every PD host has RDMA devices and GPUDirect RDMA",
      "slots": [{"slot": 0, "role": "prefill", "server": "prefill-0", "gpus": list(range(8)), "port": 30000,
                 "bootstrap_port": 8998, "service_name": "sglang", "unit": "sglang.service",
                 "record": "sglang.fact", "record_path": "/etc/ansible/facts.d/sglang.fact",
                 "environment": ORDER}],
      "flags": [{"--disaggregation-mode": "prefill", "--disaggregation-transfer-backend": "mooncake",
                 "--disaggregation-bootstrap-port": 8998,
                 "--disaggregation-ib-device": json.dumps(NEAREST, sort_keys=True, separators=(",", ":"))}],
      "absent": [["--base-gpu-id"]]}),
    ("control: the decode host of the same fleet, no bootstrap port",
     {"layout": "prefill:ep8+decode:ep8", "hosts": {"p1": RDMA, "d1": RDMA}, "host": "d1"},
     {"backend": "mooncake",
      "slots": [{"slot": 0, "role": "decode", "server": "decode-0", "port": 30000, "bootstrap_port": None}],
      "flags": [{"--disaggregation-mode": "decode", "--disaggregation-transfer-backend": "mooncake"}],
      "absent": [["--disaggregation-bootstrap-port"]]}),
    ("control: 0.5.9 takes one list of the server's nearest devices, not a per-GPU mapping",
     {"layout": "prefill:ep8+decode:ep8", "hosts": {"p1": RDMA, "d1": RDMA}, "host": "p1", "release": "0.5.9"},
     {"backend": "mooncake", "flags": [{"--disaggregation-ib-device": ",".join(TEN)}]}),
    ("no RDMA on the decode host: mooncake_tcp on 0.5.23, Mooncake with MC_FORCE_TCP=1, no IB device",
     {"layout": "prefill:ep8+decode:ep8", "hosts": {"p1": RDMA, "d1": NO_RDMA}, "host": "p1"},
     {"backend": "mooncake_tcp",
      "reason": "not every PD host can do RDMA with GPUDirect (d1: no RDMA device (/sys/class/infiniband is "
                "empty or has no active port); GPUDirect RDMA: the nvidia_peermem module is not loaded): KV over TCP",
      "slots": [{"environment": {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "MC_FORCE_TCP": "1"}, "ib_device": None}],
      "flags": [{"--disaggregation-transfer-backend": "mooncake_tcp"}],
      "absent": [["--disaggregation-ib-device"]]}),
    ("control: 0.5.9 has no mooncake_tcp, so no backend the fleet supports",
     {"layout": "prefill:ep8+decode:ep8", "hosts": {"p1": RDMA, "d1": NO_RDMA}, "host": "p1", "release": "0.5.9"},
     {"backend": None, "slots": [{"flags": None, "port": 30000}],
      "problems": ["no KV transfer backend for the PD layout: mooncake needs RDMA devices and GPUDirect RDMA "
                   "on every PD host (d1: no RDMA device", "sglang 0.5.9 has no mooncake_tcp (plain Ethernet); "
                   "0.5.23 has it"]}),
    ("forced nixl: UCX over the hosts' RDMA devices, no IB device, no MC_FORCE_TCP",
     {"layout": "prefill:ep8+decode:ep8", "hosts": {"p1": NO_GDR, "d1": RDMA}, "host": "d1", "forced": "nixl"},
     {"backend": "nixl", "reason": "sglang_pd_transfer_backend",
      "slots": [{"environment": ORDER, "ib_device": None}],
      "flags": [{"--disaggregation-transfer-backend": "nixl", "--disaggregation-mode": "decode"}],
      "absent": [["--disaggregation-ib-device"]]}),
    ("control: forced nixl where a host has no RDMA device",
     {"layout": "prefill:ep8+decode:ep8", "hosts": {"p1": NO_RDMA, "d1": RDMA}, "host": "d1", "forced": "nixl"},
     {"backend": None, "problems": ["sglang_pd_transfer_backend is nixl, whose UCX transport needs RDMA "
                                    "devices unless UCX was built with TCP; p1 has no RDMA device"]}),
    ("sglang_pd_ib_device is given verbatim, whatever the matrix says",
     {"layout": "prefill:ep8+decode:ep8", "hosts": {"p1": RDMA, "d1": RDMA}, "host": "p1",
      "ib_device": {"0": "mlx5_0"}},
     {"backend": "mooncake", "flags": [{"--disaggregation-ib-device": '{"0":"mlx5_0"}'}]}),
    ("two prefill servers on one host: slot 1 on ports + 10, its own unit and record",
     {"layout": "prefill:2xtp4+decode:tp8", "hosts": {"h1": RDMA, "h2": RDMA}, "host": "h1"},
     {"backend": "mooncake",
      "slots": [{"slot": 0, "server": "prefill-0", "gpus": [0, 1, 2, 3], "port": 30000, "bootstrap_port": 8998,
                 "service_name": "sglang", "record": "sglang.fact"},
                {"slot": 1, "server": "prefill-1", "gpus": [4, 5, 6, 7], "port": 30010, "bootstrap_port": 9008,
                 "service_name": "sglang-s1", "unit": "sglang-s1.service", "record": "sglang_s1.fact",
                 "record_path": "/etc/ansible/facts.d/sglang_s1.fact", "environment": ORDER}],
      "flags": [{"--disaggregation-bootstrap-port": 8998,
                 "--disaggregation-ib-device": '{"0":"mlx5_3","1":"mlx5_5","2":"mlx5_4","3":"mlx5_0,mlx5_1,mlx5_2"}'},
                {"--disaggregation-bootstrap-port": 9008, "--base-gpu-id": 4,
                 "--disaggregation-ib-device": '{"4":"mlx5_7","5":"mlx5_9","6":"mlx5_8","7":"mlx5_6"}'}],
      "absent": [["--base-gpu-id"], []]}),
    ("a prefill and a decode server on one host: the decode in slot 1 has no bootstrap port",
     {"layout": "prefill:tp4+decode:tp4", "hosts": {"h1": NO_RDMA}, "host": "h1"},
     {"backend": "mooncake_tcp",
      "slots": [{"slot": 0, "role": "prefill", "port": 30000, "bootstrap_port": 8998},
                {"slot": 1, "role": "decode", "port": 30010, "bootstrap_port": None, "service_name": "sglang-s1"}],
      "flags": [{}, {"--base-gpu-id": 4, "--disaggregation-mode": "decode"}]}),
    ("slot 1's HTTP port is slot 0's bootstrap port: refused naming both",
     {"layout": "prefill:2xtp4+decode:tp8", "hosts": {"h1": RDMA, "h2": RDMA}, "host": "h1",
      "bootstrap_port": 30010},
     {"problems": ["h1, slot 1 (prefill prefill-1): its HTTP port 30010 is slot 0 (prefill prefill-0)'s "
                   "bootstrap port too: every server of a host needs ports of its own, and slot k listens on "
                   "server_port and sglang_pd_bootstrap_port plus k x 10"], "count": 1}),
    ("slot 1's bootstrap port is server_port, slot 0's HTTP port",
     {"layout": "prefill:2xtp4+decode:tp8", "hosts": {"h1": RDMA, "h2": RDMA}, "host": "h1",
      "bootstrap_port": 29990},
     {"problems": ["h1, slot 1 (prefill prefill-1): its bootstrap port 30000 is slot 0 (prefill prefill-0)'s "
                   "HTTP port too"], "count": 1}),
    ("the bootstrap port is server_port",
     {"layout": "prefill:ep8+decode:ep8", "hosts": {"p1": RDMA, "d1": RDMA}, "host": "p1",
      "bootstrap_port": 30000},
     {"problems": ["p1, slot 0 (prefill prefill-0): its bootstrap port 30000 is its own "
                   "HTTP port too"], "count": 1}),
    ("control: ports that stay apart on both slots",
     {"layout": "prefill:2xtp4+decode:tp8", "hosts": {"h1": RDMA, "h2": RDMA}, "host": "h1",
      "bootstrap_port": 30001},
     {"backend": "mooncake", "slots": [{"port": 30000, "bootstrap_port": 30001},
                                       {"port": 30010, "bootstrap_port": 30011}]}),
    ("slot 1's ports would pass 65535",
     {"layout": "prefill:2xtp4+decode:tp8", "hosts": {"h1": RDMA, "h2": RDMA}, "host": "h1",
      "server_port": 65530, "bootstrap_port": 8998},
     {"problems": ["h1, slot 1 (prefill prefill-1): its HTTP port would be 65540 (server_port or "
                   "sglang_pd_bootstrap_port plus 1 x 10), above 65535"], "count": 1}),
    ("a server_port that is no port",
     {"layout": "prefill:ep8+decode:ep8", "hosts": {"p1": RDMA, "d1": RDMA}, "host": "d1", "server_port": "http"},
     {"problems": ['server_port must be a port 1-65535, the servers\' HTTP port (got "http")'], "count": 1,
      "slots": [{"port": None, "service_name": "sglang"}]}),
    ("a PD host without transport facts: no backend is chosen from part of the fleet",
     {"layout": "prefill:ep8+decode:ep8", "hosts": {"p1": RDMA, "d1": None}, "host": "p1"},
     {"backend": None, "problems": ["d1 has no transport facts (gpu_prereqs with transport: true, "
                                    "registered as __server_pd_facts)"], "count": 1}),
    ("control: a release the collection has the help of needs no help flags",
     {"layout": "prefill:ep8+decode:ep8", "hosts": {"p1": RDMA, "d1": RDMA}, "host": "p1",
      "release": "0.5.23", "facts": None},
     {"backend": "mooncake"}),
    ("every problem at once: the release's, the host's, the ports'",
     {"layout": "prefill:2xtp4+decode:tp8", "hosts": {"h1": RDMA, "h2": None}, "host": "h1",
      "release": "0.5.9", "forced": "mooncake_tcp", "bootstrap_port": 30010, "ib_device": "mlx5 0"},
     {"backend": None, "count": 4,
      "problems": ["sglang_pd_transfer_backend is mooncake_tcp, but sglang 0.5.9 has no such transfer backend",
                   "sglang_pd_ib_device must be an RDMA device", "h2 has no transport facts",
                   "h1, slot 1 (prefill prefill-1): its HTTP port 30010 is slot 0 (prefill prefill-0)'s bootstrap"]}),
]


@pytest.mark.parametrize("case, expect", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_render(case, expect):
    out = render(case)
    if "count" in expect:
        assert len(out["problems"]) == expect["count"], out["problems"]
    for text in expect.get("problems", []):
        assert any(text in p for p in out["problems"]), (text, out["problems"])
    if "problems" not in expect:
        assert out["problems"] == []
    if "backend" in expect:
        assert out["backend"] == expect["backend"]
    if "reason" in expect:
        assert expect["reason"] in out["backend_reason"]
    for got, want in zip(out["slots"], expect.get("slots", [])):
        assert dict((k, got[k]) for k in want) == want
    for i, want in enumerate(expect.get("flags", [])):
        have = pairs(out["slots"][i]["flags"])
        assert dict((k, have.get(k)) for k in want) == want, have
    for i, absent in enumerate(expect.get("absent", [])):
        assert not set(absent) & set(pairs(out["slots"][i]["flags"]))
    # whatever was rendered parses with the release's own argparse
    for item in out["slots"]:
        if item["flags"]:
            parse_with_release(case.get("release", "0.5.23"), item["flags"])


def test_an_unknown_release_needs_its_help():
    base = {"layout": "prefill:ep8+decode:ep8", "hosts": {"p1": RDMA, "d1": RDMA}, "host": "p1",
            "release": "0.5.99", "facts": None}
    out = render(base)
    assert out["backend"] is None and out["problems"] == [
        "sglang 0.5.99 is no release the collection has a --help text of, and the installed help's flags "
        "were not given: its PD flags and transfer backends are unknown"]
    # control: the installed help's facts decide
    out = render(dict(base, facts=help_facts("0.5.23")))
    assert out["problems"] == [] and out["backend"] == "mooncake"


def test_a_layout_the_grammar_refuses_and_a_host_without_a_server():
    out = _pd.render("prefill:ep8", "0.5.23", help_facts("0.5.23"), {"p1": RDMA}, "p1", [], 30000)
    assert any("must name two roles joined by one" in p for p in out["problems"])
    assert any(p.startswith("p1 has no server in the PD layout") for p in out["problems"])


def test_slot_ports_and_names():
    assert _pd_roles.slot_ports(0, 30000, 8998) == (30000, 8998)
    assert _pd_roles.slot_ports(2, 30000, 8998) == (30020, 9018)
    assert _pd_roles.slot_ports(1, 30000, None, step=5) == (30005, None)
    assert _pd_roles.slot_names(0) == {"service_name": "sglang", "unit": "sglang.service", "record": "sglang.fact",
                                       "record_path": "/etc/ansible/facts.d/sglang.fact"}
    assert _pd_roles.slot_names(3) == {"service_name": "sglang-s3", "unit": "sglang-s3.service",
                                       "record": "sglang_s3.fact",
                                       "record_path": "/etc/ansible/facts.d/sglang_s3.fact"}


def test_every_host_of_the_fleet_comes_to_the_same_backend():
    """Each host runs the plan on its own; the backend is the fleet's, not the host's."""
    hosts = {"h1": RDMA, "h2": NO_GDR, "h3": RDMA}
    plan = placements("prefill:ep8+decode:2xep8", list(hosts))
    facts = help_facts("0.5.23")
    chosen = set(_pd.render("prefill:ep8+decode:2xep8", "0.5.23", facts, hosts, h, plan[h], 30000)["backend"]
                 for h in hosts)
    assert chosen == {"mooncake_tcp"}
