"""The alert rules, checked by Prometheus' own promtool: syntax (check rules) and behaviour
(test rules over recorded series), every alert both firing and not firing."""

import re
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.gpufleet.sglang.plugins.module_utils.monitoring import _monitoring as m

PROMTOOL = shutil.which("promtool")


def promtool(*args, cwd=None):
    if not PROMTOOL:
        pytest.fail("promtool is missing: scripts/bootstrap installs Debian's prometheus package")
    return subprocess.run([PROMTOOL] + list(args), cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def server(host, group="sglang_servers", strategy="pp8", release="0.5.9", port=30000,
           pd_role="none"):
    return {"job": "sglang_server", "instance": "%s:%d" % (host, port), "host": host,
            "group": group, "site": "default", "strategy": strategy, "release": release,
            "pd_role": pd_role, "model_commit": "c" * 40}


def router(host="rt", group="sglang_servers"):
    return {"job": "sglang_router", "instance": "127.0.0.1:29000", "host": host,
            "group": group, "site": "default", "release": "smg-1.13.0"}


def sel(name, labels):
    return "%s{%s}" % (name, ",".join('%s="%s"' % kv for kv in sorted(labels.items())))


def series(name, labels, values):
    return {"series": sel(name, labels), "values": values}


RULES = m.alert_rules()
ALERTS = dict((r["alert"], r) for r in RULES["groups"][0]["rules"] if "alert" in r)


def expand(template, labels, value):
    """Prometheus' rendering of the few template forms the rules use."""
    def one(match):
        expr = match.group(1).strip()
        if expr.startswith("$labels."):
            return labels[expr[len("$labels."):]]
        if expr == "$value":
            return ("%g" % value)
        if expr == "$value | humanizePercentage":
            return "%g%%" % (value * 100)
        if expr == "$value | humanize":  # Prometheus' %.4g, with no unit prefix from 1 to 999
            assert value == 0 or 1 <= abs(value) < 1000, value
            return "%.4g" % value
        raise AssertionError("template form the test does not know: " + expr)
    return re.sub(r"\{\{(.*?)\}\}", one, template)


def fired(name, labels, value):
    """An expected alert: the rule's labels and its annotations rendered for these labels."""
    rule = ALERTS[name]
    ann = dict((k, expand(v, labels, value)) for k, v in rule["annotations"].items())
    assert labels["host"] in ann["description"], (name, ann)  # each names the host
    assert "Next:" in ann["description"], (name, ann)  # ... and the next step
    return {"exp_labels": dict(labels, severity=rule["labels"]["severity"]),
            "exp_annotations": ann}


def keep(labels, *names):
    return dict((k, labels[k]) for k in names)


def cases():
    a, b, c = server("gpu-1"), server("gpu-2"), server("gpu-3")
    rt = router()
    out = []
    # 1. not ready: gpu-1 stops answering at 1m; for 2m -> firing from 3m on; gpu-2 never
    out.append({"interval": "1m", "input_series": [
        series("up", a, "1 0 0 0 0 0"), series("up", b, "1 1 1 1 1 1")],
        "alert_rule_test": [
            {"eval_time": "2m", "alertname": "SGLangServerNotReady", "exp_alerts": []},
            {"eval_time": "4m", "alertname": "SGLangServerNotReady",
             "exp_alerts": [fired("SGLangServerNotReady", a, 0)]}]})
    # 2. router: gpu-2 removed from the router by hand at 2m (smg sets -1) while it is up
    rkeys = ("group", "host", "instance")
    out.append({"interval": "1m", "input_series": [
        series("up", a, "1x8"), series("up", b, "1x8"), series("up", rt, "1x8"),
        series("smg_worker_health", dict(rt, worker="http://gpu-1:30000"), "1x8"),
        series("smg_worker_health", dict(rt, worker="http://gpu-2:30000"), "1 1 -1 -1 -1 -1 -1 -1")],
        "alert_rule_test": [
            {"eval_time": "3m", "alertname": "SGLangRouterMissingWorkers", "exp_alerts": []},
            {"eval_time": "5m", "alertname": "SGLangRouterMissingWorkers",
             "exp_alerts": [fired("SGLangRouterMissingWorkers", keep(rt, *rkeys), 1)]}]})
    # 2b. control: gpu-2 is down and the router agrees -> no router alert
    out.append({"interval": "1m", "input_series": [
        series("up", a, "1x8"), series("up", b, "1 1 0 0 0 0 0 0"), series("up", rt, "1x8"),
        series("smg_worker_health", dict(rt, worker="http://gpu-1:30000"), "1x8"),
        series("smg_worker_health", dict(rt, worker="http://gpu-2:30000"), "1 1 0 0 0 0 0 0")],
        "alert_rule_test": [
            {"eval_time": "6m", "alertname": "SGLangRouterMissingWorkers", "exp_alerts": []}]})
    # 2c. a router that lists no worker at all while both servers are up
    out.append({"interval": "1m", "input_series": [
        series("up", a, "1x5"), series("up", b, "1x5"), series("up", rt, "1x5")],
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "SGLangRouterMissingWorkers", "exp_alerts": []},
            {"eval_time": "4m", "alertname": "SGLangRouterMissingWorkers",
             "exp_alerts": [fired("SGLangRouterMissingWorkers", keep(rt, *rkeys), 0)]}]})
    # 3. circuit breaker: gpu-1's opens at 2m (for 1m); gpu-2's is half open (2): no alert
    cb1 = dict(rt, worker="http://gpu-1:30000")
    out.append({"interval": "1m", "input_series": [
        series("smg_worker_cb_state", cb1, "0 0 1 1 1 1"),
        series("smg_worker_cb_state", dict(rt, worker="http://gpu-2:30000"), "0 2 2 2 2 2")],
        "alert_rule_test": [
            {"eval_time": "2m", "alertname": "SGLangRouterCircuitOpen", "exp_alerts": []},
            {"eval_time": "4m", "alertname": "SGLangRouterCircuitOpen",
             "exp_alerts": [fired("SGLangRouterCircuitOpen", cb1, 1)]}]})
    # 4. KV usage: gpu-1 at 95% from 1m (for 5m), gpu-2 at 85% (below 90%)
    s1 = dict(a, model_name="kimi", engine_type="unified", tp_rank="0", pp_rank="0")
    s2 = dict(b, model_name="kimi", engine_type="unified", tp_rank="0", pp_rank="0")
    s3 = dict(c, model_name="kimi", engine_type="unified", tp_rank="0", pp_rank="0")
    out.append({"interval": "1m", "input_series": [
        series("sglang:token_usage", s1, "0.5 0.95x10"),
        series("sglang:token_usage", s2, "0.85x10")],
        "alert_rule_test": [
            {"eval_time": "4m", "alertname": "SGLangKVCacheNearlyFull", "exp_alerts": []},
            {"eval_time": "8m", "alertname": "SGLangKVCacheNearlyFull",
             "exp_alerts": [fired("SGLangKVCacheNearlyFull", s1, 0.95)]}]})
    # 5. queue: gpu-1's grows by 2 a minute; gpu-2's is long but flat; gpu-3's grew, then drained
    out.append({"interval": "1m", "input_series": [
        series("sglang:num_queue_reqs", s1, "0+2x20"),
        series("sglang:num_queue_reqs", s2, "5x20"),
        series("sglang:num_queue_reqs", s3, "0+2x5 10-1x10 0x5")],
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "SGLangQueueGrowing", "exp_alerts": []},
            {"eval_time": "15m", "alertname": "SGLangQueueGrowing",
             "exp_alerts": [fired("SGLangQueueGrowing", s1, 30)]}]})
    # 6. stalled: gpu-1 runs 3 requests at 0 tok/s; gpu-2 is idle; gpu-3 generates
    out.append({"interval": "1m", "input_series": [
        series("sglang:gen_throughput", s1, "0x10"), series("sglang:num_running_reqs", s1, "3x10"),
        series("sglang:gen_throughput", s2, "0x10"), series("sglang:num_running_reqs", s2, "0x10"),
        series("sglang:gen_throughput", s3, "50x10"), series("sglang:num_running_reqs", s3, "3x10")],
        "alert_rule_test": [
            {"eval_time": "3m", "alertname": "SGLangGenerationStalled", "exp_alerts": []},
            {"eval_time": "7m", "alertname": "SGLangGenerationStalled",
             "exp_alerts": [fired("SGLangGenerationStalled", s1, 0)]}]})
    # 7. drift: in g1 gpu-3 runs ep8 against two pp8; in g2 a tie (both named); g3 agrees
    g1 = [server("gpu-1", "g1"), server("gpu-2", "g1"), server("gpu-3", "g1", strategy="ep8")]
    g2 = [server("gpu-4", "g2"), server("gpu-5", "g2", release="0.5.23")]
    g3 = [server("gpu-6", "g3"), server("gpu-7", "g3")]
    dkeys = ("group", "host", "instance", "release", "strategy")
    out.append({"interval": "1m", "input_series": [
        series("up", s, "1x15") for s in g1 + g2 + g3],
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "SGLangServerDrift", "exp_alerts": []},
            {"eval_time": "12m", "alertname": "SGLangServerDrift", "exp_alerts": [
                fired("SGLangServerDrift", keep(g1[2], *dkeys), 1),
                fired("SGLangServerDrift", keep(g2[0], *dkeys), 1),
                fired("SGLangServerDrift", keep(g2[1], *dkeys), 1)]}]})
    out.extend(kv_transfer_cases())
    return out


def kv_transfer_cases():
    """SGLangKVTransferFailing over SGLang's PD counters, which have no sample before their
    first failure (a labelled prometheus_client Counter) and lose their series while the
    server restarts (Prometheus writes stale markers when the scrape fails)."""
    pre = server("gpu-1", strategy="prefill:ep8+decode:2xep8", release="0.5.23",
                 pd_role="prefill")
    dec = server("gpu-2", strategy="prefill:ep8+decode:2xep8", release="0.5.23",
                 pd_role="decode")
    dec2 = server("gpu-3", strategy="prefill:ep8+decode:2xep8", release="0.5.23",
                  pd_role="decode")

    def sched(target, engine):
        return dict(target, model_name="k2", engine_type=engine, tp_rank="0", pp_rank="0",
                    moe_ep_rank="0")

    def alert(target, engine, failure):
        return dict(keep(target, "group", "host", "instance", "pd_role"), engine_type=engine,
                    failure=failure)

    boot, xfer = "sglang:num_bootstrap_failed_reqs_total", "sglang:num_transfer_failed_reqs_total"
    out = []
    # A. a fresh Prometheus finds gpu-1's 3 old failures: silent; gpu-2's first failure
    #    (its series appears at 6m with 1) fires at 7m (for 1m) and clears once the
    #    window (5m) has passed it
    out.append({"interval": "1m", "input_series": [
        series("up", t, "1x20") for t in (pre, dec)] + [
        series(boot, sched(pre, "prefill"), "3x20"),
        series(xfer, sched(dec, "decode"), "_x6 1x14")],
        "alert_rule_test": [
            {"eval_time": "3m", "alertname": "SGLangKVTransferFailing", "exp_alerts": []},
            {"eval_time": "7m", "alertname": "SGLangKVTransferFailing",
             "exp_alerts": [fired("SGLangKVTransferFailing", alert(dec, "decode", "transfer"), 1)]},
            {"eval_time": "12m", "alertname": "SGLangKVTransferFailing", "exp_alerts": []}]})
    # B. gpu-1 fails one bootstrap a minute from 9m (5 in the window at 14m); gpu-3 restarts
    #    (down 3m-6m, its counter's series gone) and fails its first transfer at 8m
    out.append({"interval": "1m", "input_series": [
        series("up", pre, "1x20"), series("up", dec2, "1x2 0 0 0 0 1x13"),
        series(boot, sched(pre, "prefill"), "3x8 4+1x11"),
        series(xfer, sched(dec2, "decode"), "2x2 stale _x4 1x12")],
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "SGLangKVTransferFailing", "exp_alerts": []},
            {"eval_time": "9m", "alertname": "SGLangKVTransferFailing",
             "exp_alerts": [fired("SGLangKVTransferFailing", alert(dec2, "decode", "transfer"), 1)]},
            {"eval_time": "14m", "alertname": "SGLangKVTransferFailing",
             "exp_alerts": [fired("SGLangKVTransferFailing", alert(pre, "prefill", "bootstrap"), 5)]}]})
    return out


def write(tmp_path, rules):
    (tmp_path / "sglang.rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
    (tmp_path / "tests.yml").write_text(yaml.safe_dump({
        "rule_files": ["sglang.rules.yml"], "evaluation_interval": "1m", "tests": cases()},
        sort_keys=False))


def test_rules_pass_promtool_check():
    assert sorted(ALERTS) == sorted([
        "SGLangServerNotReady", "SGLangRouterMissingWorkers", "SGLangRouterCircuitOpen",
        "SGLangKVCacheNearlyFull", "SGLangQueueGrowing", "SGLangGenerationStalled",
        "SGLangServerDrift", "SGLangKVTransferFailing"])


def test_every_rule_fires_and_stays_quiet(tmp_path):
    write(tmp_path, RULES)
    res = promtool("check", "rules", "sglang.rules.yml", cwd=str(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS: 9 rules found" in res.stdout
    # every alert has a test that expects it to fire and one that expects silence
    tested = {}
    for case in cases():
        for t in case["alert_rule_test"]:
            tested.setdefault(t["alertname"], set()).add(bool(t["exp_alerts"]))
    assert tested == dict((name, {True, False}) for name in ALERTS)
    res = promtool("test", "rules", "tests.yml", cwd=str(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout + res.stderr


def test_the_tests_can_fail(tmp_path):
    """Control: rules that never fire fail the same promtool tests."""
    broken = m.alert_rules()
    for rule in broken["groups"][0]["rules"]:
        if "alert" in rule:
            rule["expr"] = "vector(1) == 0"
    write(tmp_path, broken)
    res = promtool("test", "rules", "tests.yml", cwd=str(tmp_path))
    assert res.returncode != 0
    for name in ALERTS:
        assert name in res.stdout + res.stderr, name


def test_rule_settings_checked_at_once():
    rules = m.alert_rules({"not_ready_for": "10s", "kv_usage_threshold": 0.8})
    assert ALERTS and rules["groups"][0]["rules"][1]["for"] == "10s"
    assert "> 0.8" in [r for r in rules["groups"][0]["rules"] if r.get("alert") ==
                       "SGLangKVCacheNearlyFull"][0]["expr"]
    with pytest.raises(m.MonitoringError) as exc:
        m.alert_rules({"not_ready_for": "soon", "kv_usage_threshold": 2, "server_job": "a b",
                       "nope": 1})
    text = str(exc.value)
    for part in ("monitoring_rules_not_ready_for='soon'", "kv_usage_threshold=2",
                 "monitoring_rules_server_job='a b'", "unknown rule settings: nope"):
        assert part in text, text
