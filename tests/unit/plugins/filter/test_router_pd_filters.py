"""The router's PD workers from the inventory (filter router_pd_workers) and their worker
API bodies (router_pd_payloads)."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.sglang.plugins.filter import router_pd as f

GROUPS = {"sglang_servers": ["s1", "s2", "s3"], "sglang_decode": ["s3"]}


def hostvars():
    return {
        "s1": {"ansible_host": "10.0.0.1", "sglang_pd_role": "prefill",
               "sglang_pd_bootstrap_port": 9000},
        "s2": {"ansible_host": "10.0.0.2", "sglang_pd_role": ["decode"], "server_port": 30001},
        "s3": {"ansible_host": "10.0.0.3"},
    }


def test_roles_from_the_host_variable_and_the_pin_group():
    got = f.router_pd_workers(GROUPS["sglang_servers"], GROUPS, hostvars())
    assert got == [
        {"host": "s1", "url": "http://10.0.0.1:30000", "role": "prefill", "bootstrap_port": 9000},
        {"host": "s2", "url": "http://10.0.0.2:30001", "role": "decode", "bootstrap_port": None},
        {"host": "s3", "url": "http://10.0.0.3:30000", "role": "decode", "bootstrap_port": None},
    ]


def test_default_bootstrap_port_and_no_role_at_all():
    hv = hostvars()
    del hv["s1"]["sglang_pd_bootstrap_port"]
    got = f.router_pd_workers(["s1", "s3"], GROUPS, hv)
    assert got[0]["bootstrap_port"] == 8998
    plain = {"s1": {"ansible_host": "10.0.0.1"}, "s2": {"ansible_host": "10.0.0.2"}}
    assert f.router_pd_workers(["s1", "s2"], {"sglang_servers": ["s1", "s2"]}, plain) == []


def test_multi_node_server_is_its_rank_0():
    groups = {"sglang_servers": ["a0", "a1", "d0"], "pfx": ["a0", "a1"]}
    hv = {"a0": {"ansible_host": "10.0.1.0", "sglang_nnodes": 2, "sglang_server_group": "pfx",
                 "sglang_pd_role": "prefill"},
          "a1": {"ansible_host": "10.0.1.1", "sglang_nnodes": 2, "sglang_server_group": "pfx",
                 "sglang_pd_role": "prefill"},
          "d0": {"ansible_host": "10.0.2.0", "sglang_pd_role": "decode"}}
    got = f.router_pd_workers(groups["sglang_servers"], groups, hv)
    assert [(w["host"], w["role"]) for w in got] == [("a0", "prefill"), ("d0", "decode")]


def test_refusals():
    hv = hostvars()
    hv["s3"] = {"ansible_host": "10.0.0.3"}
    with pytest.raises(AnsibleFilterError, match="s3 has no PD role"):
        f.router_pd_workers(["s1", "s2", "s3"], {}, hv)
    hv["s3"]["sglang_pd_role"] = ["prefill", "decode"]
    with pytest.raises(AnsibleFilterError, match="a host serving both roles"):
        f.router_pd_workers(["s1", "s2", "s3"], {}, hv)
    groups = {"sglang_prefill": ["s3"], "sglang_decode": ["s3"]}
    with pytest.raises(AnsibleFilterError, match="s3 is in both sglang_prefill and sglang_decode"):
        f.router_pd_workers(["s3"], groups, {"s3": {}})


def test_payloads():
    workers = f.router_pd_workers(GROUPS["sglang_servers"], GROUPS, hostvars())
    bodies = f.router_pd_payloads(workers)
    assert bodies["http://10.0.0.1:30000"] == {"url": "http://10.0.0.1:30000",
                                               "worker_type": "prefill", "bootstrap_port": 9000}
    assert bodies["http://10.0.0.3:30000"] == {"url": "http://10.0.0.3:30000",
                                               "worker_type": "decode"}
    with pytest.raises(AnsibleFilterError, match="sglang_pd_role is 'mixed'"):
        f.router_pd_payloads([{"url": "http://a:1", "role": "mixed"}])
