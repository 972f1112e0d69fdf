# -*- coding: utf-8 -*-
"""Prefill/decode (PD): the releases' PD facts from their real --help, each role's flags
(parsed by each release's real argparse, rebuilt from its actions.json), the transfer
backend from host facts, the RDMA devices per GPU from a real topo matrix, and the
refusals of PD inputs."""

import json
import os

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _pd
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import parse_pd
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._gpu_parse import parse_topology_nics
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_help import parse_help
from ansible_collections.gpufleet.sglang.tests.unit.plugins.module_utils.prepare import rebuild_sglang_help

from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES
from ansible_collections.gpufleet.sglang.tests.paths import SGLANG_HELP
from ansible_collections.gpufleet.sglang.tests.paths import SGLANG_RELEASES as RELEASES

_CACHE = {}


def help_flags(name):
    if name not in _CACHE:
        with open(os.path.join(SGLANG_HELP, name)) as handle:
            _CACHE[name] = parse_help(handle.read())["flags"]
    return _CACHE[name]


def actions_of(release):
    with open(os.path.join(SGLANG_HELP, "argparse", "sglang-%s.actions.json" % release)) as handle:
        return json.load(handle)["actions"]


_Refused = rebuild_sglang_help.Refused


def parse_with_release(release, pairs):
    """Parse ``--model-path /m`` and ``pairs`` with the release's real parser, abbreviations
    off (only exact option strings)."""
    return rebuild_sglang_help.strict_parse(actions_of(release), pairs)


def facts(release):
    return _pd.facts_from_help(help_flags("sglang-%s.txt" % release))


# --- the releases' facts come from their help texts -------------------------------------

@pytest.mark.parametrize("release", RELEASES)
def test_the_known_releases_are_what_their_help_texts_say(release):
    assert _pd.KNOWN_RELEASES[release] == facts(release)
    assert _pd.release_facts(release) == facts(release)
    # the choices are argparse's own (the ground truth the help was printed from)
    actions = dict((a["option_strings"][0], a) for a in actions_of(release))
    assert facts(release)["backends"] == actions["--disaggregation-transfer-backend"]["choices"]
    assert facts(release)["modes"] == actions["--disaggregation-mode"]["choices"]
    assert facts(release)["bootstrap_port_default"] == actions["--disaggregation-bootstrap-port"]["default"]
    assert sorted(_pd.KNOWN_RELEASES) == sorted(RELEASES)


def test_what_the_fixtures_show_release_by_release():
    assert "mooncake_tcp" in facts("0.5.23")["backends"]
    assert "mooncake_tcp" not in facts("0.5.9")["backends"]
    assert "mori" in facts("0.5.9")["backends"] and "mori" not in facts("0.5.4.post3")["backends"]
    assert facts("0.4.6.post5")["backends"] == ["mooncake", "nixl"]
    # the other role's sizes: 0.5.4.post3 and 0.5.9 only
    assert [r for r in RELEASES if "decode_tp" in facts(r)["flags"]] == ["0.5.4.post3", "0.5.9"]
    # the per-GPU JSON form of --disaggregation-ib-device: 0.5.23 only
    assert [r for r in RELEASES if facts(r)["ib_device_per_gpu"]] == ["0.5.23"]
    # a wider help (COLUMNS=200) gives the same facts
    assert _pd.facts_from_help(help_flags("sglang-0.5.23-cols200.txt")) == facts("0.5.23")
    assert _pd.first_known_with_backend("mooncake_tcp") == "0.5.23"
    assert _pd.first_known_with_backend("nixl") == "0.4.6.post5"
    assert _pd.first_known_with_backend("nothing") is None


def test_an_unknown_release_is_left_to_prepare():
    assert _pd.release_facts("0.5.10") is None
    assert _pd.release_facts("v0.5.9") == facts("0.5.9")
    assert _pd.release_facts("not a version") is None and _pd.release_facts(None) is None
    assert _pd.release_problems('"prefill:ep8+decode:ep8"', "0.5.10", None) == []
    # a backend's spelling is still checked without the release
    assert _pd.release_problems("s", "0.5.10", None, "fake") != []


def test_a_release_without_the_pd_flags_is_refused():
    flags = dict((k, v) for k, v in help_flags("sglang-0.5.9.txt").items() if "disaggregation" not in k)
    bare = _pd.facts_from_help(flags)
    assert bare["flags"] == ["base_gpu_id"] and bare["backends"] == []
    problems = _pd.release_problems('"prefill:ep8+decode:2xep8"', "0.4.5", bare)
    assert len(problems) == 1
    assert problems[0].startswith('strategy "prefill:ep8+decode:2xep8" is a prefill/decode (PD) layout, '
                                  "but sglang 0.4.5 has no --disaggregation-mode, "
                                  "--disaggregation-transfer-backend, --disaggregation-bootstrap-port")
    assert "sglang_release" in problems[0]
    # the control: the release's own help passes
    assert _pd.release_problems("s", "0.5.9", facts("0.5.9")) == []


@pytest.mark.parametrize("release, backend, expect", [
    ("0.5.9", "mooncake_tcp", "sglang_pd_transfer_backend is mooncake_tcp, but sglang 0.5.9 has no such "
                              "transfer backend (its --disaggregation-transfer-backend takes mooncake, "
                              "nixl, ascend, fake, mori); mooncake_tcp is in the help of 0.5.23, the "
                              "first release the collection knows with it"),
    ("0.4.6.post5", "mooncake_tcp", "takes mooncake, nixl)"),
    ("0.5.23", "fake", "sglang_pd_transfer_backend is fake, which the collection does not deploy"),
    ("0.5.23", "mori", "which the collection does not deploy: it deploys mooncake, mooncake_tcp, nixl"),
    ("0.5.23", "tcp; rm -rf /", "sglang_pd_transfer_backend must be one of mooncake, mooncake_tcp, nixl"),
    ("0.5.23", 5, "sglang_pd_transfer_backend must be one of"),
])
def test_a_forced_backend_the_release_or_the_collection_lacks_is_refused(release, backend, expect):
    problems = _pd.release_problems("s", release, facts(release), backend)
    assert len(problems) == 1 and expect in problems[0]


@pytest.mark.parametrize("release, backend", [("0.5.23", "mooncake_tcp"), ("0.5.9", "mooncake"),
                                              ("0.5.9", "nixl"), ("0.4.6.post5", "mooncake")])
def test_a_backend_the_release_has_passes(release, backend):
    assert _pd.release_problems("s", release, facts(release), backend) == []


# --- each role's flags, parsed by the release ------------------------------------------

@pytest.mark.parametrize("release", RELEASES)
def test_role_flags_parse_with_each_release(release):
    roles = parse_pd("prefill:ep8+decode:2xep8")
    f = facts(release)
    prefill = _pd.role_flags("prefill", roles, release, f, "mooncake", ib_device="mlx5_0")
    decode = _pd.role_flags("decode", roles, release, f, "mooncake")
    assert prefill == [["--disaggregation-mode", "prefill"], ["--disaggregation-transfer-backend", "mooncake"],
                       ["--disaggregation-bootstrap-port", 8998], ["--disaggregation-ib-device", "mlx5_0"]]
    # the bootstrap port lives on the prefill server only
    assert decode == [["--disaggregation-mode", "decode"], ["--disaggregation-transfer-backend", "mooncake"]]
    ns = parse_with_release(release, prefill)
    # (the rebuilt parser keeps values as text: it checks names, arity and choices)
    assert (ns.disaggregation_mode, ns.disaggregation_transfer_backend,
            ns.disaggregation_bootstrap_port, ns.disaggregation_ib_device) == ("prefill", "mooncake", "8998", "mlx5_0")
    assert parse_with_release(release, decode).disaggregation_mode == "decode"
    # the control: the parser refuses a backend the release lacks
    if "mooncake_tcp" not in facts(release)["backends"]:
        with pytest.raises(_Refused, match="invalid choice: 'mooncake_tcp'"):
            parse_with_release(release, [["--disaggregation-transfer-backend", "mooncake_tcp"]])


def test_the_other_roles_sizes_go_where_the_release_has_them():
    roles = parse_pd("prefill:tp8-pp2+decode:2xtp8-dp8")
    for release in ("0.5.4.post3", "0.5.9"):
        prefill = _pd.role_flags("prefill", roles, release, facts(release), "nixl", bootstrap_port=9000,
                                 base_gpu_id=0)
        decode = _pd.role_flags("decode", roles, release, facts(release), "nixl")
        # decode's dp (8) differs from prefill's (1); its tp (8) does not
        assert ["--disaggregation-decode-dp", 8] in prefill and \
            not any(pair[0] == "--disaggregation-decode-tp" for pair in prefill)
        assert ["--disaggregation-prefill-pp", 2] in decode
        assert ["--disaggregation-bootstrap-port", 9000] in prefill
        ns = parse_with_release(release, prefill)
        assert ns.disaggregation_decode_dp == "8"
        assert parse_with_release(release, decode).disaggregation_prefill_pp == "2"
    # gone from 0.5.23: not rendered
    prefill = _pd.role_flags("prefill", roles, "0.5.23", facts("0.5.23"), "mooncake_tcp")
    decode = _pd.role_flags("decode", roles, "0.5.23", facts("0.5.23"), "mooncake_tcp")
    assert [p[0] for p in prefill + decode if "decode-dp" in p[0] or "prefill-pp" in p[0]] == []
    parse_with_release("0.5.23", prefill)
    with pytest.raises(_Refused, match="unrecognized arguments: --disaggregation-decode-dp"):
        parse_with_release("0.5.23", [["--disaggregation-decode-dp", 8]])
    # a server on GPUs 4-7 of a shared host
    decode = _pd.role_flags("decode", roles, "0.5.23", facts("0.5.23"), "mooncake_tcp", base_gpu_id=4)
    assert parse_with_release("0.5.23", decode).base_gpu_id == "4"


def test_role_flags_refuse_what_the_release_lacks():
    roles = parse_pd("prefill:ep8+decode:ep8")
    with pytest.raises(_pd.PDError, match="mooncake_tcp, but sglang 0.5.9 has no such transfer backend"):
        _pd.role_flags("prefill", roles, "0.5.9", facts("0.5.9"), "mooncake_tcp")
    with pytest.raises(_pd.PDError, match="no transfer backend chosen"):
        _pd.role_flags("decode", roles, "0.5.9", facts("0.5.9"), None)
    with pytest.raises(_pd.PDError, match="role must be prefill or decode"):
        _pd.role_flags("both", roles, "0.5.9", facts("0.5.9"), "mooncake")


# --- the transfer backend from host facts ---------------------------------------------

RDMA = {"ib_devices": ["mlx5_0", "mlx5_1"], "peermem": True}
NO_RDMA = {"ib_devices": [], "peermem": False}
NO_GDR = {"ib_devices": ["mlx5_0"], "peermem": False}


def test_rdma_and_gpudirect_everywhere_choose_mooncake():
    chosen, problems = _pd.choose_backend("0.5.9", facts("0.5.9"), {"p1": RDMA, "d1": RDMA})
    assert problems == [] and chosen["backend"] == "mooncake"


@pytest.mark.parametrize("missing, why", [
    (NO_RDMA, "d1: no RDMA device (/sys/class/infiniband is empty or has no active port); GPUDirect "
              "RDMA: the nvidia_peermem module is not loaded"),
    (NO_GDR, "d1: GPUDirect RDMA: the nvidia_peermem module is not loaded"),
    ({"ib_devices": [{"name": "mlx5_0", "state": "4: ACTIVE"}]}, "nvidia_peermem module is not known to be loaded"),
    ({"ib_devices": [{"name": "mlx5_0", "state": "1: DOWN"}], "peermem": True}, "no RDMA device"),
])
def test_without_rdma_somewhere_mooncake_tcp_where_the_release_has_it(missing, why):
    chosen, problems = _pd.choose_backend("0.5.23", facts("0.5.23"), {"p1": RDMA, "d1": missing})
    assert problems == [] and chosen["backend"] == "mooncake_tcp"
    assert why in chosen["reason"] and "p1" not in chosen["reason"]
    # 0.5.9 has no mooncake_tcp: a refusal that says what is missing where
    chosen, problems = _pd.choose_backend("0.5.9", facts("0.5.9"), {"p1": RDMA, "d1": missing})
    assert chosen is None and len(problems) == 1
    assert problems[0].startswith("no KV transfer backend for the PD layout: mooncake needs RDMA devices "
                                  "and GPUDirect RDMA on every PD host (d1: ")
    assert why in problems[0]
    assert "sglang 0.5.9 has no mooncake_tcp (plain Ethernet); 0.5.23 has it" in problems[0]


def test_a_forced_backend_is_checked_against_the_hosts():
    chosen, problems = _pd.choose_backend("0.5.23", facts("0.5.23"), {"p1": RDMA, "d1": NO_RDMA}, "mooncake")
    assert chosen is None and problems[0].startswith(
        "sglang_pd_transfer_backend is mooncake, which needs RDMA devices and GPUDirect RDMA on every PD "
        "host (even on one host); d1: no RDMA device")
    assert "set sglang_pd_transfer_backend to mooncake_tcp" in problems[0]
    chosen, problems = _pd.choose_backend("0.5.9", facts("0.5.9"), {"p1": NO_RDMA}, "mooncake")
    assert "mooncake_tcp" not in problems[0]  # 0.5.9 has none to offer
    chosen, problems = _pd.choose_backend("0.5.23", facts("0.5.23"), {"p1": NO_RDMA}, "nixl")
    assert chosen is None and "nixl, whose UCX transport needs RDMA devices" in problems[0]
    chosen, problems = _pd.choose_backend("0.5.9", facts("0.5.9"), {"p1": NO_RDMA}, "mooncake_tcp")
    assert chosen is None and "0.5.9 has no such transfer backend" in problems[0]
    # the controls: what the hosts and the release allow
    assert _pd.choose_backend("0.5.23", facts("0.5.23"), {"p1": NO_RDMA}, "mooncake_tcp")[0]["backend"] == \
        "mooncake_tcp"
    assert _pd.choose_backend("0.5.9", facts("0.5.9"), {"p1": NO_GDR}, "nixl")[0]["backend"] == "nixl"
    assert _pd.choose_backend("0.5.9", facts("0.5.9"), {"p1": RDMA}, "mooncake")[0]["backend"] == "mooncake"


# --- RDMA devices per GPU from the topology ----------------------------------------------

H200 = os.path.join(FIXTURES, "nvidia-smi", "h200-x8-topo.txt")


def h200_topology():
    with open(H200) as handle:
        return parse_topology_nics(handle.read())


ALL_TEN = ["mlx5_%d" % i for i in range(10)]


def test_each_gpu_gets_its_nearest_rdma_devices_on_0_5_23():
    value = _pd.ib_device_value(facts("0.5.23"), ALL_TEN, range(8), h200_topology())
    # the matrix's PIX cells: GPU0-NIC3, GPU1-NIC5, GPU2-NIC4, GPU3-NIC0/1/2, GPU4-NIC7,
    # GPU5-NIC9, GPU6-NIC8, GPU7-NIC6
    assert json.loads(value) == {"0": "mlx5_3", "1": "mlx5_5", "2": "mlx5_4", "3": "mlx5_0,mlx5_1,mlx5_2",
                                 "4": "mlx5_7", "5": "mlx5_9", "6": "mlx5_8", "7": "mlx5_6"}
    # a server on GPUs 4-7 of the host maps those GPUs only
    assert json.loads(_pd.ib_device_value(facts("0.5.23"), ALL_TEN, [4, 5, 6, 7], h200_topology())) == \
        {"4": "mlx5_7", "5": "mlx5_9", "6": "mlx5_8", "7": "mlx5_6"}
    # the value parses with the release
    assert parse_with_release("0.5.23", [["--disaggregation-ib-device", value]]).disaggregation_ib_device == value


def test_only_the_hosts_rdma_devices_count_and_ties_are_kept():
    # mlx5_0-2 are not RDMA devices of this host: GPU3's nearest are then NIC3-5, all NODE
    devices = ["mlx5_%d" % i for i in range(3, 10)]
    value = json.loads(_pd.ib_device_value(facts("0.5.23"), devices, [3], h200_topology()))
    assert value == {"3": "mlx5_3,mlx5_4,mlx5_5"}


def test_older_releases_get_one_list_of_the_servers_nearest_devices():
    low = _pd.ib_device_value(facts("0.5.9"), ALL_TEN, range(4), h200_topology())
    assert low == "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5"
    assert _pd.ib_device_value(facts("0.5.9"), ALL_TEN, range(4, 8), h200_topology()) == \
        "mlx5_6,mlx5_7,mlx5_8,mlx5_9"
    parse_with_release("0.5.9", [["--disaggregation-ib-device", low]])


def test_without_a_usable_matrix_every_device_in_natural_order():
    devices = ["mlx5_10", "mlx5_9", "mlx5_1"]
    assert _pd.ib_device_value(facts("0.5.23"), devices, range(8)) == "mlx5_1,mlx5_9,mlx5_10"
    # a matrix without the NIC legend names no device of the host
    with open(os.path.join(FIXTURES, "nvidia-smi", "issue-excerpts", "a100-sxm4-80gb-x1-check-env-tabs.txt")) as h:
        nameless = parse_topology_nics(h.read())
    assert _pd.ib_device_value(facts("0.5.23"), ["mlx5_0"], [0], nameless) == "mlx5_0"
    assert _pd.ib_device_value(facts("0.5.23"), [], range(8), h200_topology()) is None


# --- refusals of the single inputs ------------------------------------------------------

@pytest.mark.parametrize("key", ["--disaggregation-mode", "disaggregation_mode", "--disaggregation-transfer-backend",
                                 "--disagg-mode", "--disaggregation-decode-enable-radix-cache"])
def test_pd_flags_outside_a_pd_layout_are_refused_naming_server_extra_args_and_the_flag(key):
    problems = _pd.extra_args_problems({key: "prefill", "--trust-remote-code": True}, '"ep8"', False)
    assert len(problems) == 1
    assert problems[0].startswith('server_extra_args %s: "prefill" is a prefill/decode (PD) flag, and strategy '
                                  '"ep8" is no PD layout' % key)
    assert "prefill:ep8+decode:2xep8" in problems[0]


def test_inside_a_pd_layout_the_flags_the_layout_sets_are_refused():
    extra = {"--disaggregation-mode": "decode", "--disaggregation-transfer-backend": "nixl",
             "disaggregation_bootstrap_port": 9000, "--disaggregation-ib-device": "mlx5_0",
             "--disaggregation-decode-tp": 8, "--base-gpu-id": 4, "--disaggregation-m": "decode",
             # the decode options are not the layout's: they go to every server
             "--disaggregation-decode-enable-radix-cache": True, "--max-running-requests": 128}
    problems = _pd.extra_args_problems(extra, '"prefill:ep8+decode:ep8"', True)
    assert [p.split(":")[0] for p in problems] == [
        "server_extra_args --base-gpu-id", "server_extra_args --disaggregation-decode-tp",
        "server_extra_args --disaggregation-ib-device", "server_extra_args --disaggregation-m",
        "server_extra_args --disaggregation-mode", "server_extra_args --disaggregation-transfer-backend",
        "server_extra_args disaggregation_bootstrap_port"]
    assert "sets --disaggregation-transfer-backend on each server by its role; choose the backend with " \
           "sglang_pd_transfer_backend" in problems[5]
    assert "choose the port with sglang_pd_bootstrap_port" in problems[6]
    # outside PD, --base-gpu-id stays the user's
    assert _pd.extra_args_problems({"--base-gpu-id": 4}, '"ep8"', False) == []
    assert _pd.extra_args_problems("not a mapping", '"ep8"', False) == []


def test_bootstrap_port_and_ib_device_inputs():
    assert _pd.port_problems(None) == [] and _pd.port_problems(9000, 30000) == []
    assert _pd.port_problems("http")[0].startswith("sglang_pd_bootstrap_port must be a port 1-65535")
    assert _pd.port_problems(70000) and _pd.port_problems(True)
    assert "is the server's HTTP port" in _pd.port_problems(30000, 30000)[0]
    assert _pd.ib_device_problems("mlx5_0,mlx5_1") == [] and _pd.ib_device_problems({"0": "mlx5_0"}) == []
    assert _pd.ib_device_problems("mlx5_0 mlx5_1")[0].startswith("sglang_pd_ib_device must be")


@pytest.mark.parametrize("package, version, refused", [
    ("sglang-router", "0.2.1", True), ("sglang-router", "0.1.4", True), ("sglang-router", "0.2.2", True),
    ("sglang-router", "0.3.2", False), ("smg", "1.13.0", False), (None, None, False), ("smg", None, False),
    ("sglang-router", "junk", False),  # the router role names a malformed version
])
def test_a_router_that_cannot_route_pd_is_refused(package, version, refused):
    problems = _pd.router_problems([("r1", package, version), ("r2", "smg", "1.13.0")])
    assert bool(problems) == refused
    if refused:
        assert problems[0].startswith("router r1 runs router_package sglang-router %s, which the collection "
                                      "cannot run in PD mode" % version)


def test_the_router_helps_have_the_pd_flags_the_refusal_names():
    # what router_problems says of smg 1.13.0 and sglang-router 0.3.2 is in their help texts
    for name in ("smg-1.13.0.txt", "sglang-router-0.3.2.txt"):
        with open(os.path.join(FIXTURES, "router-help", name)) as handle:
            text = handle.read()
        for flag in ("--pd-disaggregation", "--prefill PREFILL", "--decode URL"):
            assert flag in text
