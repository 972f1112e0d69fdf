# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The fleet in Prometheus: file_sd target groups for the servers and the routers.

Prometheus' ``file_sd_configs`` read a JSON list of ``{"targets": [...], "labels": {...}}``
groups. One group per server (a multi-node server: its rank 0, the only rank that serves
HTTP, chosen as ``router_worker_urls`` chooses it) and one per router; the labels say what
runs there (``strategy``, ``release`` from the deployment record ``ansible_local.sglang``,
``model_commit`` from the model directory's marker) and where (``host``, ``site``,
``group``), so that the alert rules can name the host and compare a server with the rest
of its group.

``pd_role`` says a server's prefill/decode role: ``prefill`` or ``decode`` (the record's
``argv``, ``--disaggregation-mode``), ``none`` for a co-located server, and, without a
record, the inventory's pin (``sglang_pd_role``, the groups ``sglang_prefill`` and
``sglang_decode``) or ``unknown``, as ``strategy`` and ``release`` say ``unknown``. Every
target has the label: Prometheus reads an absent label as the empty value, so
``pd_role="none"`` reads plainly where ``pd_role=""`` would not, in selectors, in ``by
(pd_role)`` and in ``{{ $labels.pd_role }}`` (the status table's words: prefill, decode,
and co-located for none).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

try:
    from urllib.parse import urlsplit
except ImportError:  # pragma: no cover - Python 2 is not supported by the collection
    from urlparse import urlsplit  # type: ignore

from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router
from ansible_collections.gpufleet.sglang.plugins.module_utils.status._status_fleet import inventory_pd

#: Prometheus label values we write; names follow Prometheus' label name rule.
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
UNKNOWN = "unknown"
ANY_ADDRESS = ("0.0.0.0", "::", "[::]", "")


class MonitoringError(Exception):
    """An inventory input the targets cannot be built from (names the variable and value)."""


def _site(hv):
    return str(hv.get("sglang_site") or hv.get("model_site") or "default")


def _record(hv):
    local = hv.get("ansible_local")
    rec = local.get("sglang") if isinstance(local, dict) else None
    return rec if isinstance(rec, dict) else {}


#: ``pd_role`` of a co-located server.
NO_PD_ROLE = "none"


def pd_role(host, hv, groups=None):
    """A server's ``pd_role`` label (the module's doc): the record's role, ``none`` for a
    co-located record, else the inventory's pin, else ``unknown``."""
    facts = inventory_pd([host], {host: hv}, groups).get(host)
    if facts is None:
        return UNKNOWN
    return str(facts["role"] or NO_PD_ROLE)


def server_labels(host, hv, group, groups=None):
    """The labels of one server's target: what the record says runs there, and where."""
    rec = _record(hv)
    return {
        "host": host,
        "site": _site(hv),
        "group": group,
        "strategy": str(rec.get("strategy") or UNKNOWN),
        "release": str(rec.get("release") or UNKNOWN),
        "pd_role": pd_role(host, hv, groups),
        "model_commit": str(hv.get("__monitoring_model_commit") or UNKNOWN),
    }


def _target_of(url, host, var):
    parts = urlsplit(url)
    if not parts.hostname or parts.scheme not in ("http", "https"):
        raise MonitoringError("%s=%r for %s is not an http(s) URL with a host" % (var, url, host))
    return parts.netloc, parts.scheme


def _extra_labels(extra, errors):
    if not isinstance(extra, dict):
        errors.append("monitoring_extra_labels=%r is not a mapping of label names to values"
                      % (extra,))
        return {}
    bad = sorted(k for k in extra if not LABEL_NAME.match(str(k)) or str(k).startswith("__"))
    if bad:
        errors.append("monitoring_extra_labels has label names Prometheus refuses: %s"
                      % ", ".join(bad))
    return dict((str(k), str(v)) for k, v in extra.items())


def server_targets(servers, groups, hostvars, group, default_port=30000, extra_labels=None):
    """One file_sd group per server of ``servers``: rank 0 of a multi-node server only.

    The address is the router's worker URL of that host (``sglang_router_worker_url``, else
    ``<sglang_node_address, ansible_host or name>:<server_port>``), so Prometheus scrapes
    the server where the router reaches it.
    """
    errors = []
    extra = _extra_labels(extra_labels or {}, errors)
    out = []
    for host in servers:
        if host not in hostvars:
            errors.append("%s of monitoring_servers_group %s is not in the inventory" % (host, group))
            continue
        try:
            urls = _router.worker_urls([host], groups, hostvars, default_port)
        except _router.RouterError as exc:
            errors.append(str(exc))
            continue
        if not urls:
            continue  # a rank > 0 of a multi-node server serves no HTTP
        try:
            target, scheme = _target_of(urls[0], host, "sglang_router_worker_url")
        except MonitoringError as exc:
            errors.append(str(exc))
            continue
        labels = dict(extra)
        labels.update(server_labels(host, hostvars[host], group, groups))
        if scheme != "http":
            labels["__scheme__"] = scheme
        out.append({"targets": [target], "labels": labels})
    if errors:
        raise MonitoringError("monitoring targets: " + "; ".join(errors))
    return out


def router_target(host, hv):
    """``host:port`` of a router's Prometheus endpoint (``router_prometheus_host/port``)."""
    explicit = hv.get("sglang_router_metrics_target")
    if explicit:
        return str(explicit)
    bind = str(hv.get("router_prometheus_host") or "127.0.0.1")
    port = hv.get("router_prometheus_port") or 29000
    try:
        port = int(port)
    except (TypeError, ValueError):
        raise MonitoringError("router_prometheus_port=%r for %s is not a port" % (port, host))
    address = bind
    if bind in ANY_ADDRESS:
        address = str(hv.get("sglang_node_address") or hv.get("ansible_host") or host)
    if ":" in address and not address.startswith("["):
        address = "[%s]" % address
    return "%s:%d" % (address, port)


def router_targets(routers, hostvars, default_group="sglang_servers", extra_labels=None):
    """One file_sd group per router host; ``group`` is the server group it routes to."""
    errors = []
    extra = _extra_labels(extra_labels or {}, errors)
    out = []
    for host in routers:
        hv = hostvars.get(host)
        if hv is None:
            errors.append("router %s is not in the inventory" % host)
            continue
        try:
            target = router_target(host, hv)
        except MonitoringError as exc:
            errors.append(str(exc))
            continue
        labels = dict(extra)
        labels.update({
            "host": host,
            "site": _site(hv),
            "group": str(hv.get("router_servers_group") or default_group),
            "release": "%s-%s" % (hv.get("router_package") or "smg", hv.get("router_version") or UNKNOWN),
        })
        out.append({"targets": [target], "labels": labels})
    if errors:
        raise MonitoringError("monitoring targets: " + "; ".join(errors))
    return out


def model_commit(marker):
    """The commit a model directory's marker (``_model.MARKER``) names, or None."""
    if isinstance(marker, dict) and isinstance(marker.get("commit"), str) and marker["commit"]:
        return marker["commit"]
    return None


# ---------------------------------------------------------------------------------------
# Alert rules. Metric names are the exporters' own:
#   SGLang: python/sglang/srt/metrics/collector.py (sgl-project/sglang),
#     SchedulerMetricsCollector: sglang:num_running_reqs, sglang:num_queue_reqs,
#     sglang:token_usage, sglang:gen_throughput (scheduler gauges);
#   smg: model_gateway/src/observability/metrics.rs (lightseekorg/smg), init_metrics():
#     smg_worker_health (1 healthy, 0 unhealthy; -1 once a worker is removed,
#     Metrics::remove_worker_metrics, or no series at all in later releases; the rule counts
#     clamp_min(health, 0), so both read as not healthy), smg_worker_cb_state (0 closed,
#     1 open, 2 half open),
#     both labelled ``worker`` (the worker URL);
#   SGLang's PD counters (prefill/decode servers; read in the wheels from PyPI):
#     sglang:num_bootstrap_failed_reqs_total and sglang:num_transfer_failed_reqs_total,
#     Counters of SchedulerMetricsCollector (0.5.23 srt/observability/metrics_collector.py
#     l.667-676; 0.5.9 srt/metrics/collector.py l.454-463), labelled as the scheduler's
#     gauges (engine_type "prefill"/"decode", tp_rank, ...). Incremented once per request
#     aborted with 500: a prefill request whose bootstrap failed (0.5.23
#     disaggregation/prefill.py l.1377; 0.5.9 l.301) or whose KV send failed (l.1312; 0.5.9
#     l.600), a decode request whose handshake failed (decode.py l.1177; 0.5.9 l.464) or
#     whose KV never came or came corrupt (l.2827, l.3373; 0.5.9 l.857, l.872). The
#     timeouts count there: SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT and
#     ..._WAITING_TIMEOUT (300 s each) set the request's poll to Failed ("timed out after
#     ... in KVPoll.Bootstrapping" / "... in KVPoll.WaitingForInput",
#     disaggregation/common/conn.py l.2385-2407, l.2888-2912 in 0.5.23). A labelled
#     counter has no sample before its first increment (``.labels(...).inc(1)``,
#     metrics_collector.py l.1434-1438), so the rule also counts a series that appeared
#     within the window. smg 1.13.0 counts no SGLang KV transfer: its
#     smg_pd_kv_transfer_failures_total is vLLM NIXL's missing kv_transfer_params,
#     smg_pd_bootstrap_failures_total a request body that is not a JSON object, and
#     smg_pd_rendezvous_failures_total, on the HTTP path, only a prefill's bootstrap port
#     that refused smg's probe at registration (none of them in the smg metric list the
#     rules are checked against, tests/fixtures/smg/metric-names.txt);
#   Prometheus itself: ``up`` of each scrape target (0: the server did not answer /metrics).
# ---------------------------------------------------------------------------------------

DURATION = re.compile(r"^[0-9]+(ms|s|m|h)$")

#: What the rules are parameterised with (the monitoring role's monitoring_rules_* vars).
RULE_DEFAULTS = {
    "server_job": "sglang_server",
    "router_job": "sglang_router",
    "not_ready_for": "2m",
    "router_workers_for": "2m",
    "circuit_open_for": "1m",
    "kv_usage_threshold": 0.9,
    "kv_usage_for": "5m",
    "queue_window": "10m",
    "queue_for": "10m",
    "stalled_for": "5m",
    "drift_for": "10m",
    "kv_transfer_window": "5m",
    "kv_transfer_for": "1m",
}

#: SGLang's PD failure counters, by the ``failure`` label the KV transfer alert gives them.
KV_TRANSFER_FAILURES = (
    ("bootstrap", "sglang:num_bootstrap_failed_reqs_total"),
    ("transfer", "sglang:num_transfer_failed_reqs_total"),
)

DRIFT_RECORD = "sglang_fleet:servers:count_by_release_strategy"


def check_rule_settings(settings):
    """Every rule setting checked at once; returns the settings merged over the defaults."""
    merged = dict(RULE_DEFAULTS)
    merged.update(settings or {})
    errors = []
    unknown = sorted(set(merged) - set(RULE_DEFAULTS))
    if unknown:
        errors.append("unknown rule settings: %s (known: %s)"
                      % (", ".join(unknown), ", ".join(sorted(RULE_DEFAULTS))))
    for key, value in sorted(merged.items()):
        if key.endswith(("_for", "_window")) and not DURATION.match(str(value)):
            errors.append("monitoring_rules_%s=%r is not a Prometheus duration such as 2m or 30s"
                          % (key, value))
        if key.endswith("_job") and not LABEL_VALUE_SAFE.match(str(value)):
            errors.append("monitoring_rules_%s=%r is not a plain job name" % (key, value))
    try:
        threshold = float(merged["kv_usage_threshold"])
        if not 0 < threshold <= 1:
            raise ValueError
        merged["kv_usage_threshold"] = threshold
    except (TypeError, ValueError):
        errors.append("monitoring_rules_kv_usage_threshold=%r is not a fraction in (0, 1]"
                      % (merged["kv_usage_threshold"],))
    if errors:
        raise MonitoringError("monitoring rules: " + "; ".join(errors))
    return merged


LABEL_VALUE_SAFE = re.compile(r"^[A-Za-z0-9_.:-]+$")


def _alert(name, expr, duration, severity, summary, description):
    return {"alert": name, "expr": expr, "for": duration,
            "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description}}


def kv_transfer_failures_expr(server_job, window):
    """Failed KV bootstraps and transfers per server within ``window``: ``sum by (group,
    host, instance, pd_role, engine_type, failure)``, ``failure`` ``bootstrap`` or
    ``transfer`` (:data:`KV_TRANSFER_FAILURES`). A counter's ``increase`` where it rose, else
    a series that appeared within the window (its first failure since the server started;
    only where Prometheus scraped the server a window ago, so that a new Prometheus does not
    read old failures as new)."""
    srv = 'job="%s"' % server_job
    parts = []
    for failure, metric in KV_TRANSFER_FAILURES:
        series = "%s{%s}" % (metric, srv)
        parts.append(
            'label_replace((increase(%s[%s]) > 0) or ((%s unless %s offset %s) and on (instance) '
            '(up{%s} offset %s)), "failure", "%s", "", "")'
            % (series, window, series, series, window, srv, window, failure))
    return "sum by (group, host, instance, pd_role, engine_type, failure) (%s) > 0" % (
        " or ".join(parts))


def alert_rules(settings=None):
    """The rule file's content (a dict Prometheus reads as YAML): one group, eight alerts."""
    s = check_rule_settings(settings)
    srv = 'job="%s"' % s["server_job"]
    rtr = 'job="%s"' % s["router_job"]
    status = ("ansible-playbook playbooks/status.yml -i <inventory> -l {{ $labels.host }}")
    per_host_combo = (
        "group by (group, host, instance, release, strategy) (up{%s})"
        " * on (group, release, strategy) group_left %s" % (srv, DRIFT_RECORD))
    rules = [
        {"record": DRIFT_RECORD,
         "expr": "count by (group, release, strategy) (up{%s})" % srv},
        _alert(
            "SGLangServerNotReady", "up{%s} == 0" % srv, s["not_ready_for"], "critical",
            "SGLang server {{ $labels.host }} is not ready",
            "{{ $labels.host }} ({{ $labels.instance }}, group {{ $labels.group }}, "
            "{{ $labels.strategy }} on {{ $labels.release }}) has not answered /metrics for "
            + s["not_ready_for"] + ". Next: `" + status + "`, then "
            "`journalctl -u sglang` on {{ $labels.host }}; re-run playbooks/deploy.yml -l "
            "{{ $labels.host }} to restore its last known good server."),
        _alert(
            "SGLangRouterMissingWorkers",
            "(sum by (group, host, instance) (clamp_min(smg_worker_health{%s}, 0))"
            " or sum by (group, host, instance) (up{%s}) * 0)"
            " < on (group) group_left () count by (group) (up{%s} == 1)" % (rtr, rtr, srv),
            s["router_workers_for"], "warning",
            "Router {{ $labels.host }} routes to fewer servers than are up",
            "Router {{ $labels.host }} ({{ $labels.instance }}) lists {{ $value }} healthy "
            "workers (0 as well when its metrics do not answer), fewer than the servers of group "
            "{{ $labels.group }} that are up. Next: "
            "compare `curl http://<router>:<port>/workers` with the inventory, then re-run "
            "playbooks/deploy.yml (the router role adds every server of the group back)."),
        _alert(
            "SGLangRouterCircuitOpen", "smg_worker_cb_state{%s} == 1" % rtr,
            s["circuit_open_for"], "warning",
            "Router {{ $labels.host }} has opened the circuit of {{ $labels.worker }}",
            "Router {{ $labels.host }} sends nothing to worker {{ $labels.worker }}: its "
            "circuit breaker is open (too many failed requests). Next: `" + status.replace(
                "{{ $labels.host }}", "<the worker's host>") + "` and the worker's "
            "`journalctl -u sglang`; the circuit closes by itself once requests succeed."),
        _alert(
            "SGLangKVCacheNearlyFull",
            "sglang:token_usage{%s} > %s" % (srv, repr(s["kv_usage_threshold"])),
            s["kv_usage_for"], "warning",
            "KV cache of {{ $labels.host }} is nearly full",
            "{{ $labels.host }} ({{ $labels.strategy }}) has used {{ $value | humanizePercentage }} "
            "of its KV cache for " + s["kv_usage_for"] + "; requests will queue or be retracted. "
            "Next: add servers behind the router, or plan a strategy with more KV room "
            "(`ansible-playbook playbooks/plan.yml`)."),
        _alert(
            "SGLangQueueGrowing",
            "sglang:num_queue_reqs{%s} > 0 and deriv(sglang:num_queue_reqs{%s}[%s]) > 0"
            % (srv, srv, s["queue_window"]),
            s["queue_for"], "warning",
            "Requests queue up on {{ $labels.host }}",
            "The waiting queue of {{ $labels.host }} has grown for " + s["queue_for"]
            + " (now {{ $value }} requests). Next: check its load and KV usage on the "
            "dashboard and `" + status + "`; add capacity or lower the router's load on it."),
        _alert(
            "SGLangGenerationStalled",
            "sglang:gen_throughput{%s} == 0 and sglang:num_running_reqs{%s} > 0" % (srv, srv),
            s["stalled_for"], "critical",
            "{{ $labels.host }} generates nothing while requests run",
            "{{ $labels.host }} has had running requests but a generation throughput of 0 for "
            + s["stalled_for"] + ": the server is hung. Next: `" + status + "`, the host's "
            "`journalctl -u sglang` and GPU state (`nvidia-smi`); restart it through "
            "playbooks/deploy.yml -l {{ $labels.host }}."),
        _alert(
            "SGLangServerDrift",
            "(" + per_host_combo + " < on (group) group_left max by (group) (" + DRIFT_RECORD
            + ")) or (" + per_host_combo + " and on (group) (count by (group) (" + DRIFT_RECORD
            + " == on (group) group_left max by (group) (" + DRIFT_RECORD + ")) > 1))",
            s["drift_for"], "warning",
            "{{ $labels.host }} runs a different release or strategy than its group",
            "{{ $labels.host }} runs {{ $labels.strategy }} on {{ $labels.release }}, which "
            "differs from the rest of group {{ $labels.group }}. Next: "
            "`ansible-playbook playbooks/deploy.yml -l {{ $labels.host }}` with the group's "
            "strategy and release, then re-run playbooks/monitoring.yml to refresh the labels."),
        _alert(
            "SGLangKVTransferFailing",
            kv_transfer_failures_expr(s["server_job"], s["kv_transfer_window"]),
            s["kv_transfer_for"], "critical",
            "{{ $labels.host }} fails KV {{ $labels.failure }}s of prefill/decode requests",
            "{{ $labels.host }} ({{ $labels.engine_type }} server, group {{ $labels.group }}) "
            "counted {{ $value | humanize }} failed KV {{ $labels.failure }}s in the last "
            + s["kv_transfer_window"] + " (sglang:num_{{ $labels.failure }}_failed_reqs_total; "
            "the release's timeouts, SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT and "
            "SGLANG_DISAGGREGATION_WAITING_TIMEOUT, 300 s each, count there): each of those "
            "requests was aborted with a 500. Next: `" + status + "` (its PD and PEERS "
            "columns: is every peer up?), then `journalctl -u sglang` on {{ $labels.host }} "
            "and on its peers for 'bootstrap failed', 'handshake failed', 'transfer failed' or "
            "'timed out after'; "
            "a decode host must reach every prefill host's bootstrap and transfer ports "
            "(playbooks/deploy.yml checks it before any host changes)."),
    ]
    return {"groups": [{"name": "gpufleet-sglang", "rules": rules}]}


def alert_names(rules_doc):
    """The alert names of a rules document, in order."""
    return [r["alert"] for g in rules_doc["groups"] for r in g["rules"] if "alert" in r]


# ---------------------------------------------------------------------------------------
# status.yml's optional view of a Prometheus: the alerts that fire now (/api/v1/alerts).
# ---------------------------------------------------------------------------------------

def firing_alerts(doc, hosts=None, prometheus_url=""):
    """The firing alerts of an ``/api/v1/alerts`` answer, one row each, sorted by host.

    ``hosts`` (optional) keeps alerts whose ``host`` label is one of them, and alerts that
    name no host. A row: ``alertname``, ``host``, ``severity``, ``since`` (activeAt),
    ``summary``, ``line`` (one line for the table's side).
    """
    if not isinstance(doc, dict) or doc.get("status") != "success" or not isinstance(
            (doc.get("data") or {}).get("alerts"), list):
        raise MonitoringError("%s/api/v1/alerts did not answer a Prometheus alert list: %s"
                              % (prometheus_url.rstrip("/"), str(doc)[:300]))
    wanted = set(hosts) if hosts else None
    rows = []
    for alert in doc["data"]["alerts"]:
        if alert.get("state") != "firing":
            continue
        labels = alert.get("labels") or {}
        host = labels.get("host") or ""
        if wanted is not None and host and host not in wanted:
            continue
        summary = (alert.get("annotations") or {}).get("summary") or ""
        row = {"alertname": labels.get("alertname") or "", "host": host,
               "severity": labels.get("severity") or "", "since": alert.get("activeAt") or "",
               "summary": summary}
        row["line"] = "%-28s %-20s %-9s since %s  %s" % (
            row["alertname"], host or "-", row["severity"] or "-", row["since"] or "-", summary)
        rows.append(row)
    rows.sort(key=lambda r: (r["host"], r["alertname"]))
    return rows
