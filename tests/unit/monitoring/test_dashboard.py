"""The Grafana dashboard (roles/monitoring/files/sglang-fleet-dashboard.json) and the alert
rules query only series the exporters really have: the SGLang emulator's /metrics (SGLang's
own names, per release) and smg's metric list (tests/fixtures/smg/metric-names.txt, taken
from smg's source), plus Prometheus' own ``up``."""

import json
import os
import re
import sys

from ansible_collections.gpufleet.sglang.plugins.module_utils.monitoring import _monitoring as m
from ansible_collections.gpufleet.sglang.plugins.module_utils.status._status import parse_exposition
from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES, ROOT
from ansible_collections.gpufleet.sglang.tests.ports import free_port

sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "emulator"))
from test_emulator import emus  # noqa: E402,F401  pylint: disable=unused-import,wrong-import-position

DASHBOARD = os.path.join(ROOT, "roles", "monitoring", "files", "sglang-fleet-dashboard.json")
SMG = os.path.join(FIXTURES, "smg", "metric-names.txt")
PROMETHEUS_OWN = {"up"}

FUNCTIONS_AND_KEYWORDS = {
    "sum", "max", "min", "avg", "count", "rate", "irate", "increase", "deriv", "delta",
    "histogram_quantile", "clamp_min", "clamp_max", "group", "topk", "bottomk", "by",
    "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
    "offset", "label_values", "vector", "abs", "time"}


def metric_names(expr):
    """The metric names a PromQL expression selects (labels, strings, ranges, clauses out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)       # strings
    text = re.sub(r"\{[^}]*\}", " ", text)                 # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)                # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", text):
        word, call = match.group(1), match.group(2)
        if call or word in FUNCTIONS_AND_KEYWORDS:
            continue
        names.add(word)
    return names


def test_metric_names_parser():
    assert metric_names('histogram_quantile(0.99, sum by (host, le) (rate('
                        'sglang:time_to_first_token_seconds_bucket{job="x", host=~"$host"}[5m])))'
                        ) == {"sglang:time_to_first_token_seconds_bucket"}
    assert metric_names("a{x=\"b c\"} > on (group) group_left () count by (g) (up == 1)"
                        ) == {"a", "up"}


def smg_names():
    names = set()
    with open(SMG) as fh:
        for line in fh:
            if line.startswith("#") or not line.strip():
                continue
            kind, name = line.split()
            names |= ({name + s for s in ("_bucket", "_sum", "_count")}
                      if kind == "histogram" else {name})
    return names


def emulator_names(emus, release, extra=()):  # noqa: F811
    e = emus(["--model-path", "m", "--enable-metrics"] + list(extra), release,
             SGLANG_EMULATOR_LOAD_SECONDS="0.1", SGLANG_EMULATOR_WARMUP_SECONDS="0.1")
    e.wait_ready()
    status, body = e.get("/metrics")
    assert status == 200
    return set(name for name, labels, value in parse_exposition(body.decode()))


def dashboard_queries():
    with open(DASHBOARD) as fh:
        dash = json.load(fh)
    queries = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    # Grafana's label_values(<series>, <label name>): the series is the query
    queries += [re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", v["query"]["query"])
                for v in dash["templating"]["list"] if isinstance(v.get("query"), dict)]
    return dash, queries


def test_dashboard_covers_what_the_issue_asks():
    dash, queries = dashboard_queries()
    used = set().union(*(metric_names(q) for q in queries))
    for name in ("sglang:gen_throughput", "sglang:num_running_reqs", "sglang:num_queue_reqs",
                 "sglang:token_usage", "sglang:time_to_first_token_seconds_bucket",
                 "sglang:inter_token_latency_seconds_bucket", "smg_worker_health"):
        assert name in used, name
    assert all(p["datasource"]["uid"] == "${datasource}" for p in dash["panels"])
    assert len(set(p["id"] for p in dash["panels"])) == len(dash["panels"])


def test_every_queried_metric_is_exported(emus):  # noqa: F811
    exported = smg_names() | PROMETHEUS_OWN
    per_release = {}
    for release in ("0.4.6.post5", "0.5.9"):
        per_release[release] = emulator_names(emus, release)
        exported |= per_release[release]
    # the inter-token histogram has its pre-0.5 name on 0.4.6.post5 only
    assert "sglang:time_per_output_token_seconds_bucket" in per_release["0.4.6.post5"]
    assert "sglang:inter_token_latency_seconds_bucket" in per_release["0.5.9"]
    # a prefill server's PD series (the KV transfer alert's counters), 0.5.9 and 0.5.23
    for release in ("0.5.9", "0.5.23"):
        pd = emulator_names(emus, release, ["--disaggregation-mode", "prefill",
                                            "--disaggregation-bootstrap-port", str(free_port())])
        assert "sglang:num_transfer_failed_reqs_total" in pd - per_release["0.5.9"], release
        exported |= pd
    dummy, queries = dashboard_queries()
    rules = m.alert_rules()["groups"][0]["rules"]
    recorded = set(r["record"] for r in rules if "record" in r)
    missing = {}
    for q in queries + [r["expr"] for r in rules]:
        lacking = metric_names(q) - exported - recorded
        if lacking:
            missing[q] = sorted(lacking)
    assert not missing, missing


def test_the_check_can_fail(emus):  # noqa: F811
    """Control: a misspelt name (vLLM's spelling) is reported."""
    exported = smg_names() | PROMETHEUS_OWN | emulator_names(emus, "0.5.9")
    assert metric_names("sum by (host) (vllm:num_requests_running)") - exported == {
        "vllm:num_requests_running"}
