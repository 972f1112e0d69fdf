"""The fleet's Prometheus targets: one per server (rank 0 of a multi-node one), labels."""

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.monitoring import _monitoring as m
from ansible_collections.gpufleet.sglang.plugins.filter.monitoring import (
    monitoring_router_targets,
    monitoring_server_targets,
)
from ansible.errors import AnsibleFilterError


def record(strategy, release):
    return {"ansible_local": {"sglang": {"strategy": strategy, "release": release}}}


def fleet():
    hostvars = {
        "gpu-1": dict(record("pp8", "0.5.9"), ansible_host="10.0.0.1", sglang_site="fra",
                      __monitoring_model_commit="a" * 40),
        "gpu-2": dict(record("pp8", "0.5.9"), ansible_host="10.0.0.2", server_port=31000),
        # a two-node server: only rank 0 (gpu-3) serves HTTP
        "gpu-3": dict(record("tp16", "0.5.23"), ansible_host="10.0.0.3", sglang_nnodes=2,
                      sglang_server_group="pair", sglang_node_rank=0),
        "gpu-4": dict(record("tp16", "0.5.23"), ansible_host="10.0.0.4", sglang_nnodes=2,
                      sglang_server_group="pair", sglang_node_rank=1),
        "gpu-5": {"sglang_router_worker_url": "https://10.9.0.5:30000/", "model_site": "ams"},
        "rt-1": {"ansible_host": "10.0.1.1", "router_prometheus_host": "0.0.0.0",
                 "router_prometheus_port": 29001, "router_version": "1.13.0"},
        "rt-2": {"ansible_host": "10.0.1.2", "router_package": "sglang-router",
                 "router_version": "0.3.2", "router_servers_group": "other"},
    }
    groups = {"sglang_servers": ["gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5"],
              "pair": ["gpu-3", "gpu-4"], "sglang_routers": ["rt-1", "rt-2"]}
    return groups, hostvars


def test_one_target_per_server_rank0_only_with_labels():
    groups, hostvars = fleet()
    out = m.server_targets(groups["sglang_servers"], groups, hostvars, "sglang_servers")
    assert [t["targets"] for t in out] == [["10.0.0.1:30000"], ["10.0.0.2:31000"],
                                           ["10.0.0.3:30000"], ["10.9.0.5:30000"]]
    assert out[0]["labels"] == {"host": "gpu-1", "site": "fra", "group": "sglang_servers",
                                "strategy": "pp8", "release": "0.5.9", "pd_role": "none",
                                "model_commit": "a" * 40}
    assert out[2]["labels"]["strategy"] == "tp16" and out[2]["labels"]["host"] == "gpu-3"
    # no record, no marker: "unknown", never a guess; the site from the model step's var
    assert out[3]["labels"]["release"] == "unknown"
    assert out[3]["labels"]["pd_role"] == "unknown"
    assert out[3]["labels"]["model_commit"] == "unknown"
    assert out[3]["labels"]["site"] == "ams"
    assert out[3]["labels"]["__scheme__"] == "https"
    assert "__scheme__" not in out[0]["labels"]


def test_the_pd_role_label():
    """The record's --disaggregation-mode; none for a co-located record; without a record the
    inventory's pin (sglang_pd_role, the groups sglang_prefill/sglang_decode), else unknown."""
    groups, hostvars = fleet()
    hostvars["gpu-1"]["ansible_local"]["sglang"]["argv"] = [
        "--model-path", "/m", "--disaggregation-mode", "prefill",
        "--disaggregation-bootstrap-port", "9001"]
    hostvars["gpu-2"]["ansible_local"]["sglang"]["argv"] = [
        "--model-path", "/m", "--disaggregation-mode=decode"]
    # the multi-node server's role is its rank 0's record (gpu-3: co-located, argv without a mode)
    hostvars["gpu-3"]["ansible_local"]["sglang"]["argv"] = ["--model-path", "/m"]
    hostvars["gpu-2"]["sglang_pd_role"] = "prefill"  # a pin the record overrides
    out = monitoring_server_targets(groups["sglang_servers"], groups, hostvars)
    assert [t["labels"]["pd_role"] for t in out] == ["prefill", "decode", "none", "unknown"]
    hostvars["gpu-5"]["sglang_pd_role"] = "decode"
    assert m.server_targets(["gpu-5"], groups, hostvars, "g")[0]["labels"]["pd_role"] == "decode"
    del hostvars["gpu-5"]["sglang_pd_role"]
    groups["sglang_prefill"] = ["gpu-5"]
    assert m.server_targets(["gpu-5"], groups, hostvars, "g")[0]["labels"]["pd_role"] == "prefill"
    assert m.pd_role("gpu-9", {}) == "unknown"


def test_same_rank0_as_the_router():
    """The targets are exactly the router's worker URLs (one helper picks both)."""
    from ansible_collections.gpufleet.sglang.plugins.module_utils.router._router import worker_urls
    groups, hostvars = fleet()
    out = m.server_targets(groups["sglang_servers"], groups, hostvars, "sglang_servers")
    urls = worker_urls(groups["sglang_servers"], groups, hostvars)
    assert [u.split("//", 1)[1].rstrip("/") for u in urls] == [t["targets"][0] for t in out]


def test_router_targets():
    groups, hostvars = fleet()
    out = m.router_targets(groups["sglang_routers"], hostvars)
    # a wildcard bind is scraped at the host's address; loopback (the default) stays
    assert out[0] == {"targets": ["10.0.1.1:29001"], "labels": {
        "host": "rt-1", "site": "default", "group": "sglang_servers", "release": "smg-1.13.0"}}
    assert out[1]["targets"] == ["127.0.0.1:29000"]
    assert out[1]["labels"]["group"] == "other"
    assert out[1]["labels"]["release"] == "sglang-router-0.3.2"
    hostvars["rt-1"]["sglang_router_metrics_target"] = "mon.example:9999"
    assert m.router_targets(["rt-1"], hostvars)[0]["targets"] == ["mon.example:9999"]


def test_extra_labels_and_errors_all_at_once():
    groups, hostvars = fleet()
    out = m.server_targets(["gpu-1"], groups, hostvars, "g", extra_labels={"env": "prod"})
    assert out[0]["labels"]["env"] == "prod" and out[0]["labels"]["group"] == "g"
    hostvars["gpu-2"]["sglang_router_worker_url"] = "ftp://x"
    hostvars["gpu-4"]["sglang_node_rank"] = 0  # two rank 0s in one server
    with pytest.raises(m.MonitoringError) as exc:
        m.server_targets(["gpu-2", "gpu-3", "nope"], groups, hostvars, "g",
                         extra_labels={"bad-name": 1, "__x": 2})
    text = str(exc.value)
    assert "sglang_router_worker_url='ftp://x' for gpu-2" in text
    assert "gpu-3" in text and "nope of monitoring_servers_group g" in text
    assert "bad-name" in text and "__x" in text
    with pytest.raises(m.MonitoringError, match="router_prometheus_port='x' for rt-1"):
        m.router_targets(["rt-1"], {"rt-1": {"router_prometheus_port": "x"}})


def test_filters_wrap_errors():
    groups, hostvars = fleet()
    assert monitoring_server_targets(groups["sglang_servers"], groups, hostvars)[1]["labels"]["host"] == "gpu-2"
    assert monitoring_router_targets(["rt-2"], hostvars)[0]["labels"]["host"] == "rt-2"
    with pytest.raises(AnsibleFilterError, match="not in the inventory"):
        monitoring_server_targets(["ghost"], groups, hostvars)
    with pytest.raises(AnsibleFilterError, match="router ghost"):
        monitoring_router_targets(["ghost"], hostvars)


def test_model_commit_from_marker():
    assert m.model_commit({"repo_id": "a/b", "commit": "c" * 40}) == "c" * 40
    assert m.model_commit({"commit": ""}) is None
    assert m.model_commit(None) is None


def test_facts_read_the_model_steps_marker():
    """roles/monitoring/tasks/facts.yml names the marker file _model.MARKER names."""
    import os
    from ansible_collections.gpufleet.sglang.plugins.module_utils.weights._model import MARKER
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))))))
    with open(os.path.join(root, "roles", "monitoring", "tasks", "facts.yml")) as fh:
        assert "{{ monitoring_model_path }}/%s" % MARKER in fh.read()
