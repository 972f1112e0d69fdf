# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""SGLang's router (PyPI ``smg``, before it ``sglang-router``): its worker API by release,
its launch flags, and the steps of a drain-aware switch.

Worker API (tried against the released binaries, see the project's reference notes):

* ``smg`` 1.x and ``sglang-router`` 0.3.x (API ``workers``): ``POST /workers
  {"url": ...}`` answers 202 with a ``worker_id`` and adds in the background; ``GET
  /workers`` lists ``{id, url, is_healthy, ...}`` (smg adds ``status``: ``ready``,
  ``draining``); ``DELETE /workers/{id}`` (the id, not the URL). smg answers 409 to a
  duplicate add and keeps a deleted worker ``draining`` for about 5 s before it goes; it
  routes no new request to a draining worker (smg 1.x behind the router scenario: 0 of 57
  requests sent in those 5 s reached it, 29 and 28 the other two), so a removal is done
  when each URL is gone or draining, and a re-add waits until the draining row has gone.
* ``sglang-router`` up to 0.2.1 (API ``legacy``): ``POST /add_worker?url=``, ``POST
  /remove_worker?url=``, ``GET /list_workers`` (``{"urls": [...]}``, no health).
* 0.2.2 used ``/workers/{url}``; it is not supported (an error names it).

PD mode (``_router_pd``): a worker is added with its role's body (``POST /workers {"url",
"worker_type", "bootstrap_port"}``); a body with the URL alone makes a ``regular`` worker,
to which a PD router routes nothing. ``GET /workers`` lists each worker's ``worker_type``
and, on a prefill worker, its ``bootstrap_port``: smg's ``WorkerInfo`` flattens its
``WorkerSpec`` into the row (``crates/protocols/src/worker.rs``: ``worker_type``, lowercase
``regular``/``prefill``/``decode``/``encode``; ``bootstrap_port`` left out when unset;
smg-project/smg at f8daa8835, crate 1.9.0, read for the pinned 1.13.0 whose wheel has the
same handlers). A worker listed with the wrong role is put right with ``PUT
/workers/{id}`` and its whole body (:meth:`Router.put`, see there for which releases).

The router does not persist workers: after a restart it knows only ``--worker-urls``.
Everything here is plain Python; the HTTP calls go through a ``fetch`` callable so the
logic is tested without a network.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _secret_exec
from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _version
from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _waiter
from ansible_collections.gpufleet.sglang.plugins.module_utils.status._status import (
    parse_exposition,
    scheduler_metrics,
)

PACKAGES = ("smg", "sglang-router")
APIS = ("workers", "legacy")


class RouterError(Exception):
    """A refusal or a failure with a message that names what was wrong."""


def api_for(package, version):
    """The worker API of an installed router release."""
    if package not in PACKAGES:
        raise RouterError("router_package is %r; expected one of %s"
                          % (package, ", ".join(PACKAGES)))
    if package == "smg":
        return "workers"
    if _version.at_least(version, "0.3.0"):
        return "workers"
    if _version.compare(version, "0.2.1") <= 0:
        return "legacy"
    raise RouterError("sglang-router %s uses /workers/{url}, which this collection does not "
                      "drive; expected sglang-router 0.3.x, <= 0.2.1, or smg" % version)


def help_argv(package, venv):
    """The command that prints the installed release's launch flags."""
    if package == "smg":
        return [venv + "/bin/smg", "launch", "--help"]
    return [venv + "/bin/python", "-m", "sglang_router.launch_router", "--help"]


def launch_prefix(package, venv, keyed=False, secret_exec=None):
    """The command before the router's flags. With ``keyed`` (the router has an API key)
    it runs through the collection's launcher (at ``secret_exec``, by default
    ``_paths.SECRET_EXEC_PATH``), which appends ``--api-key`` from
    ``ROUTER_API_KEY`` inside the process, out of ``/proc/<pid>/cmdline``, and redacts it
    from the output; smg's ``smg`` script is ``smg.cli:main``, so ``-m smg`` runs the
    same."""
    module = ["smg", "launch"] if package == "smg" else ["sglang_router.launch_router"]
    if keyed:
        return _secret_exec.prefix(venv + "/bin/python", "ROUTER_API_KEY", secret_exec) + ["-m"] + module
    if package == "smg":
        return [venv + "/bin/smg", "launch"]
    return [venv + "/bin/python", "-m"] + module


def normalize_url(url):
    return str(url).strip().rstrip("/")


def launch_argv(package, venv, flags, settings):
    """The router's command line from ``settings`` (see the role's defaults), checked
    against ``flags`` (the option strings of the installed release's ``--help``).

    Returns ``(argv, env)``: ``env`` holds what goes to the environment instead of the
    command line (``HF_ENDPOINT`` when the release cannot turn tokenizer loading off).
    Raises :class:`RouterError` naming every setting the release lacks a flag for.
    """
    argv = launch_prefix(package, venv, bool(settings.get("api_key")), settings.get("secret_exec"))
    env = {}
    missing = []

    def add(flag, value=None, setting=None):
        if flag not in flags:
            missing.append("%s (needs %s)" % (setting or flag, flag))
            return
        argv.append(flag)
        if value is not None:
            if isinstance(value, (list, tuple)):
                argv.extend(str(v) for v in value)
            else:
                argv.append(str(value))

    s = settings
    add("--host", s["host"], "router_host")
    add("--port", s["port"], "router_port")
    if not s["worker_urls"]:
        raise RouterError("router_worker_urls is empty: the inventory names no server to "
                          "route to (expected at least one rank-0 server)")
    # PD mode: _router_pd.launch_args, checked against the release's flags there. The
    # launcher drops --worker-urls in PD mode, and --prefill-policy and --decode-policy
    # override --policy, so neither is given.
    pd_args = [str(a) for a in s.get("pd_args") or []]
    # smg gives a worker a key only when it is added with one ("Adding worker ... without
    # API key"): a server with a key is left out here and added after the start with it
    # (the router role's run step, router_worker's worker_api_keys)
    own_key = set(normalize_url(u) for u in s.get("own_key_urls") or [])
    startup = [u for u in (normalize_url(w) for w in s["worker_urls"]) if u not in own_key]
    if pd_args:
        argv.extend(pd_args)
    else:
        if startup:
            add("--worker-urls", startup, "router_worker_urls")
        add("--policy", s["policy"], "router_policy")
    add("--prometheus-host", s["prometheus_host"], "router_prometheus_host")
    add("--prometheus-port", s["prometheus_port"], "router_prometheus_port")
    add("--health-check-interval-secs", s["health_check_interval"],
        "router_health_check_interval")
    add("--health-check-timeout-secs", s["health_check_timeout"], "router_health_check_timeout")
    add("--health-failure-threshold", s["health_failure_threshold"],
        "router_health_failure_threshold")
    add("--health-success-threshold", s["health_success_threshold"],
        "router_health_success_threshold")
    add("--health-check-endpoint", s["health_check_endpoint"], "router_health_check_endpoint")
    if s["circuit_breaker"]:
        add("--cb-failure-threshold", s["cb_failure_threshold"], "router_cb_failure_threshold")
        add("--cb-success-threshold", s["cb_success_threshold"], "router_cb_success_threshold")
        add("--cb-timeout-duration-secs", s["cb_timeout"], "router_cb_timeout")
        add("--cb-window-duration-secs", s["cb_window"], "router_cb_window")
    else:
        add("--disable-circuit-breaker", setting="router_circuit_breaker: false")
    if s["retries"] > 0:
        add("--retry-max-retries", s["retries"], "router_retries")
    else:
        add("--disable-retries", setting="router_retries: 0")
    add("--request-timeout-secs", s["request_timeout"], "router_request_timeout")
    add("--worker-startup-timeout-secs", s["worker_startup_timeout"],
        "router_worker_startup_timeout")
    if s["api_key"] and "--api-key" not in flags:
        # the launcher (launch_prefix) appends the flag itself
        missing.append("router_api_key (needs --api-key)")
    if "--disable-tokenizer-autoload" in flags:
        argv.append("--disable-tokenizer-autoload")
    elif not s["hf_endpoint"]:
        missing.append("router_hf_endpoint (this release has no --disable-tokenizer-autoload, "
                       "so it would load the tokenizer from huggingface.co; set the site's "
                       "Hub mirror)")
    if s["hf_endpoint"]:
        env["HF_ENDPOINT"] = s["hf_endpoint"]
    argv.extend(str(a) for a in s["extra_args"])
    if missing:
        raise RouterError("%s %s has no flag for: %s" % (package, s.get("version", ""),
                                                         "; ".join(missing)))
    return argv, env


# ---- the worker list ----

def worker_table(api, payload):
    """The router's workers as ``[{id, url, healthy, status}]`` from a list answer; a row
    also keeps the answer's ``worker_type`` and ``bootstrap_port`` where the answer has
    them (smg's rows carry ``worker_type`` always and ``bootstrap_port`` on a prefill
    worker; the legacy list has neither)."""
    rows = []
    if api == "legacy":
        for url in (payload or {}).get("urls") or []:
            rows.append({"id": None, "url": normalize_url(url), "healthy": None,
                         "status": "listed"})
        return rows
    for w in (payload or {}).get("workers") or []:
        healthy = w.get("is_healthy")
        status = w.get("status") or ("ready" if healthy else "unhealthy")
        row = {"id": w.get("id"), "url": normalize_url(w.get("url", "")),
               "healthy": bool(healthy), "status": status}
        for field in ("worker_type", "bootstrap_port"):
            if field in w:
                row[field] = w[field]
        rows.append(row)
    return rows


LEAVING = ("draining", "removing")


def is_leaving(row):
    """Whether the router keeps this row only on its way out (smg's ``draining``): it
    routes no new request to it."""
    return row.get("status") in LEAVING


def serving(rows):
    """URLs the router routes to now (healthy and not draining)."""
    return sorted(r["url"] for r in rows if r["healthy"] is not False and not is_leaving(r))


def _listed(rows, urls, on_the_way_out):
    urls = set(normalize_url(u) for u in urls)
    return sorted(set(r["url"] for r in rows if r["url"] in urls and is_leaving(r) == on_the_way_out))


def still_routed(rows, urls):
    """Those of ``urls`` the router lists in a row that is not on its way out (a removal
    is done when this is empty)."""
    return _listed(rows, urls, False)


def leaving(rows, urls):
    """Those of ``urls`` the router still lists as draining (a re-add would be refused as
    a duplicate until the row has gone)."""
    return _listed(rows, urls, True)


PD_ROLES = ("prefill", "decode")


def check_min_serving(rows, removing, min_serving):
    """Refuse a batch that would leave fewer than ``min_serving`` healthy workers, or, in a
    router whose rows carry PD roles (smg's ``worker_type``), a role with no healthy worker
    left: a PD router serves no request without a prefill and a decode worker."""
    if int(min_serving) < 1:
        raise RouterError("sglang_router_min_serving is %r; expected an integer >= 1"
                          % (min_serving,))
    removing = set(normalize_url(u) for u in removing)
    left = [u for u in serving(rows) if u not in removing]
    if len(left) < int(min_serving):
        raise RouterError(
            "refusing this batch: taking %s out of the router would leave %d healthy "
            "worker(s) (%s), fewer than sglang_router_min_serving=%d. Nothing was changed; "
            "use a smaller sglang_rollout_batch."
            % (", ".join(sorted(removing)) or "nothing", len(left),
               ", ".join(left) or "none", int(min_serving)))
    role_of = dict((r["url"], r.get("worker_type")) for r in rows)
    for role in PD_ROLES:
        listed = sorted(u for u, kind in role_of.items() if kind == role)
        if not listed:
            continue
        if not [u for u in left if role_of.get(u) == role]:
            raise RouterError(
                "refusing this batch: taking %s out of the router would leave no healthy %s "
                "worker (the router's %s workers: %s), and a PD router serves no request "
                "without one. Nothing was changed; use a smaller sglang_rollout_batch, or add "
                "a %s server first."
                % (", ".join(sorted(removing)) or "nothing", role, role, ", ".join(listed), role))
    return left


def is_drained(metrics_text):
    """``(idle, running, queued)`` from a server's ``/metrics`` text: whether its scheduler
    gauges read 0. One such reading does not make a drained server (see :func:`drain`)."""
    m = scheduler_metrics(metrics_text)
    if m["running"] is None or m["queued"] is None:
        raise RouterError("the server's /metrics has no sglang:num_running_reqs or "
                          "sglang:num_queue_reqs (is it started with --enable-metrics?)")
    return m["running"] + m["queued"] == 0, m["running"], m["queued"]


# Counters of /metrics that move while the server does work for a request (read in the
# released wheels, paths under sglang/srt/): the scheduler's sglang:realtime_tokens_total
# after every forward, prefill and decode (0.5.9 metrics/collector.py l.778,
# managers/scheduler_metrics_mixin.py l.245 and l.476-483; 0.5.23
# observability/metrics_collector.py l.1032, managers/scheduler_components/
# metrics_reporter.py l.810 and l.910-916; not in 0.5.4.post3 and older); the tokenizer's
# TTFT and inter-token histograms at each output sent to it (0.5.23
# managers/tokenizer_manager.py l.3219-3251; the health check's request is not counted,
# log_metrics=False, entrypoints/http_server.py l.761) and its finished-request counters.
PROGRESS_COUNTERS = (
    "sglang:realtime_tokens_total",
    "sglang:time_to_first_token_seconds_count",
    "sglang:inter_token_latency_seconds_count",
    "sglang:time_per_output_token_seconds_count",
    "sglang:generation_tokens_total",
    "sglang:num_requests_total",
    # a PD server's KV transfers (issue 43): one count per transfer a prefill sent, in
    # 0.5.23's histograms (older releases keep the last value in a gauge, which need not
    # move), and the failures of either role
    "sglang:kv_transfer_latency_ms_count",
    "sglang:kv_transfer_total_mb_count",
    "sglang:num_bootstrap_failed_reqs_total",
    "sglang:num_transfer_failed_reqs_total",
)

# The queues of a PD server (issue 43): a prefill server holds a request in its bootstrap
# queue (0.5.23; "prealloc" before) until the decode server took it, then in its inflight
# queue until its KV was sent; a decode server in its prealloc and transfer queues until
# the KV arrived. Neither gauge of is_drained counts those, and a prefill server sending KV
# runs no forward: a request there keeps the server busy whatever PER_FORWARD_COUNTER says.
# The series per release: the emulator's pd.metric_specs.
PD_QUEUE_GAUGES = (
    "sglang:num_prefill_bootstrap_queue_reqs",
    "sglang:num_prefill_prealloc_queue_reqs",
    "sglang:num_prefill_inflight_queue_reqs",
    "sglang:num_decode_prealloc_queue_reqs",
    "sglang:num_decode_transfer_queue_reqs",
)

# Seconds the gauges must read 0 with PROGRESS_COUNTERS unchanged before a server counts
# as drained. The gauges lag the scheduler: sglang:num_running_reqs and
# sglang:num_queue_reqs are set only when the scheduler reports, after each prefill batch
# (the running count then leaves out the requests of that batch), every
# --decode-log-interval decode steps (default 40) and, when idle, at once from 0.5.23 but
# only 30 s after the last report up to 0.5.9 (0.5.23 managers/scheduler_components/
# metrics_reporter.py l.856-862, l.934, l.1076-1081, l.1476-1525; 0.5.9
# managers/scheduler_metrics_mixin.py l.257-265, l.418-428,
# managers/scheduler_output_processor_mixin.py l.534,
# managers/scheduler_runtime_checker_mixin.py l.253-290). A request the HTTP server holds
# but the scheduler has not received (tokenizing) is in neither gauge. So a 0 can be
# stale: the quiet time must outlast one forward (0.5.9 and later, whose
# realtime_tokens_total moves at each one) and 40 decode steps (older releases).
DRAIN_QUIET_S = 3.0

# The counter a release moves at every forward (0.5.9 and later; its family is named in
# /metrics, with no sample before the first forward). Where the release has it, readings
# over the quiet time in which it does not move prove that no forward ran, so no request
# runs, whatever the gauges still say: up to 0.5.9 the idle report that sets them to 0
# comes only 30 s after the last report.
PER_FORWARD_COUNTER = "sglang:realtime_tokens_total"


def _sums(metrics_text, names):
    """Each of ``names`` that the ``/metrics`` text has, summed over its samples."""
    wanted = set(names)
    sums = {}
    for name, _labels, value in parse_exposition(metrics_text):
        if name in wanted:
            sums[name] = sums.get(name, 0.0) + value
    return sums


def pd_queued(metrics_text):
    """The requests in a PD server's queues (:data:`PD_QUEUE_GAUGES`, summed over their
    samples), or None where the text has none of them (a co-located server)."""
    sums = _sums(metrics_text, PD_QUEUE_GAUGES)
    return sum(sums.values()) if sums else None


def work_done(metrics_text):
    """The sums of :data:`PROGRESS_COUNTERS` in a ``/metrics`` text, in that order (None
    for a counter the text lacks): equal sums in two readings mean no forward ran and no
    output reached the HTTP server in between."""
    sums = _sums(metrics_text, PROGRESS_COUNTERS)
    return tuple(sums.get(name) for name in PROGRESS_COUNTERS)


# ---- the router over HTTP ----

class Router(object):
    """The router's worker API. ``fetch(method, url, body, headers, timeout)`` returns
    ``(status, text)`` and raises ``OSError`` when the router cannot be reached.

    ``put_replaces``: whether ``PUT /workers/{id}`` replaces the worker's registration (its
    role too), so that a worker listed with the wrong role is put right in place; else it
    is removed and added again with its role (see :meth:`put`)."""

    def __init__(self, base, api, fetch, api_key=None, timeout=10.0, put_replaces=True):
        if api not in APIS:
            raise RouterError("router api is %r; expected one of %s" % (api, ", ".join(APIS)))
        self.base = normalize_url(base)
        self.api = api
        self.fetch = fetch
        self.timeout = timeout
        self.put_replaces = put_replaces
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = "Bearer " + api_key

    def _call(self, method, path, body=None):
        status, text = self.fetch(method, self.base + path,
                                  json.dumps(body) if body is not None else None,
                                  self.headers, self.timeout)
        return status, text

    def workers(self):
        path = "/list_workers" if self.api == "legacy" else "/workers"
        status, text = self._call("GET", path)
        if status != 200:
            raise RouterError("GET %s%s answered %s: %s" % (self.base, path, status, text[:300]))
        try:
            return worker_table(self.api, json.loads(text))
        except ValueError:
            raise RouterError("GET %s%s did not answer JSON: %s" % (self.base, path, text[:300]))

    def add(self, url, api_key=None, body=None):
        """Add ``url``; ``api_key`` is the worker's own key (smg's ``api_key`` of
        ``POST /workers``), with which the router then calls the worker. ``body``: the
        worker's PD body (``_router_pd.worker_payload``, with its role), posted in place of
        ``{"url"}`` (its ``url`` set to ``url``; ``api_key`` added when it has none)."""
        url = normalize_url(url)
        if body is not None and self.api == "legacy":
            raise RouterError("cannot add %s to the router %s with its role: the legacy worker "
                              "API (/add_worker) takes a URL alone" % (url, self.base))
        if self.api == "legacy":
            status, text = self._call("POST", "/add_worker?url=" + url)
            ok = status == 200
        else:
            if body is not None:
                body = _with_key(dict(body, url=url), api_key)
            else:
                body = {"url": url}
                if api_key:
                    body["api_key"] = api_key
            status, text = self._call("POST", "/workers", body)
            ok = status in (200, 201, 202, 409)  # 409: smg already has it
        if not ok:
            raise RouterError("adding %s to the router %s answered %s: %s"
                              % (url, self.base, status, text[:300]))

    def put(self, worker_id, body):
        """``PUT /workers/{worker_id}`` with ``body``, a worker's whole PD body.

        What PUT does, by release (read in the sources; the route is
        ``/workers/{worker_id}`` in ``model_gateway/src/server.rs`` of smg-project/smg):

        * smg from 1.4.0 (commit 582c9e5f9, "enforce REST semantics for worker
          endpoints") to f8daa8835 (crate 1.9.0, the newest source there; the pinned 1.13.0
          wheel has the same ``replace_worker`` and ``update_worker`` handlers):
          ``.put(replace_worker)``, ``.patch(update_worker)``. PUT takes a whole
          ``WorkerSpec`` (``worker_type`` and ``bootstrap_port`` with it) and re-runs the
          registration for that id (1.4.0 ``model_gateway/src/core/worker_service.rs``;
          f8daa8835 ``model_gateway/src/worker/service.rs``, ``ReplaceById``), answering
          202; it refuses (400) a body whose ``url`` is not the worker's, and a
          data-parallel router. So the body is the whole registration: a key it leaves out
          is dropped (the caller puts the worker's own key in).
        * smg up to 1.3.3 and sglang-router 0.3.x (sgl-project/sglang,
          ``sgl-model-gateway/src/server.rs`` and ``src/protocols/worker_spec.rs``):
          ``.put(update_worker)`` with a ``WorkerUpdateRequest`` (priority, cost, labels;
          smg adds api_key and health): it cannot change ``worker_type``, so there a wrong
          role is put right by a removal and an add (a :class:`Router` made with
          ``put_replaces=False``).

        The collection pins smg 1.13.0, so a repair is this PUT (the "PD mode" table of
        ``roles/router/README.md``: the worker took its role under the same id)."""
        if self.api == "legacy":
            raise RouterError("the legacy worker API of the router %s has no PUT /workers/{id}"
                              % self.base)
        status, text = self._call("PUT", "/workers/" + str(worker_id), body)
        if status not in (200, 202):
            raise RouterError("PUT %s/workers/%s (%s as %s) answered %s: %s"
                              % (self.base, worker_id, body.get("url"), body.get("worker_type"),
                                 status, text[:300]))

    def remove(self, url, rows=None):
        url = normalize_url(url)
        if self.api == "legacy":
            status, text = self._call("POST", "/remove_worker?url=" + url)
            ok = status == 200
        else:
            ids = [r["id"] for r in (rows if rows is not None else self.workers())
                   if r["url"] == url and r["id"]]
            if not ids:
                return False
            ok = True
            for wid in ids:
                status, text = self._call("DELETE", "/workers/" + wid)
                ok = ok and status in (200, 202, 204, 404)
        if not ok:
            raise RouterError("removing %s from the router %s answered %s: %s"
                              % (url, self.base, status, text[:300]))
        return True


def _with_key(body, api_key):
    """``body`` with the worker's own key when it carries none."""
    if api_key and not body.get("api_key"):
        body = dict(body, api_key=api_key)
    return body


def pd_bodies(router, payloads, adding=()):
    """The checked PD bodies (``_router_pd.check_payloads``) of ``payloads`` (``{url:
    body}``), or None without any (None or empty: the router's regular mode, today's
    calls). A router in PD mode never gets a worker without a role: refuses, before
    anything changes, a URL of ``adding`` (those the call may add) without a body, and
    the legacy API (its ``/add_worker`` takes no role)."""
    if not payloads:
        return None
    from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router_pd

    if router.api == "legacy":
        raise RouterError("the router %s has the legacy worker API (/add_worker), which adds "
                          "no worker with its prefill or decode role; a router with PD workers "
                          "needs smg or sglang-router 0.3.x" % router.base)
    bodies = _router_pd.check_payloads(payloads)
    _router_pd.refuse_roleless(bodies, adding, router.base)
    return bodies


def misregistered(rows, bodies):
    """The rows of ``rows`` listed with another role or bootstrap port than ``bodies``
    say (``_router_pd.misregistered_rows``: ``[{"id", "url", "listed", "payload"}]``); []
    without bodies."""
    if not bodies:
        return []
    from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router_pd

    return _router_pd.misregistered_rows(rows, bodies)


def _roles_wrong(rows, urls, bodies):
    """Those of ``urls`` (each with a body) that no row lists, or that a row lists with
    another role than its body's (rows on their way out are left out)."""
    urls = [u for u in urls if u in bodies]
    present = set(r["url"] for r in rows if not is_leaving(r))
    wrong = set(m["url"] for m in misregistered([r for r in rows if r["url"] in urls],
                                                dict((u, bodies[u]) for u in urls)))
    return [u for u in urls if u not in present or u in wrong]


def wait_for(condition, timeout, interval, clock=time.monotonic, sleep=time.sleep):
    """Poll ``condition()`` (truthy result ends) until ``timeout`` s with the collection's
    one waiter; returns ``(result, elapsed)`` with the last result (falsy on a timeout)."""
    res = _waiter.wait(condition, timeout=timeout, interval=interval, clock=clock, sleep=sleep)
    return res.value, res.elapsed


def _wait_rows(router, done, timeout, interval, **clock):
    """Poll the router's rows until ``done(rows)``; ``(rows or None, elapsed)``. The rows
    come wrapped, so an emptied router (no row) ends the wait too."""
    def check():
        rows = router.workers()
        return (rows,) if done(rows) else None

    seen, elapsed = wait_for(check, timeout, interval, **clock)
    return (seen[0] if seen else None), elapsed


def take_out(router, urls, min_serving, timeout, interval, **clock):
    """Refuse when too few would serve; else remove ``urls`` and wait until the router
    routes to none of them (each is gone or draining). Returns ``{"before", "after",
    "elapsed_s", "removed"}``."""
    urls = [normalize_url(u) for u in urls]
    before = router.workers()
    check_min_serving(before, urls, min_serving)
    removed = [u for u in urls if router.remove(u, before)]
    if router.api == "legacy":
        removed = urls
    after, elapsed = _wait_rows(router, lambda rows: not still_routed(rows, urls), timeout,
                                interval, **clock)
    if after is None:
        raise RouterError("the router %s still routes to %s %.0f s after the removal"
                          % (router.base, ", ".join(urls), timeout))
    return {"before": before, "after": after, "elapsed_s": elapsed, "removed": removed}


def _repair(router, rows, bodies, keys, timeout, interval, **clock):
    """Put right each row of ``rows`` that is listed with another role than its body's:
    ``PUT /workers/{id}`` with the whole body (and the worker's own key), or, where PUT
    cannot change the role (``router.put_replaces`` false), remove it and wait until its
    row has gone. Returns ``(repaired, readd, elapsed)``: the URLs put right, those still
    to add (the removed ones) and the seconds waited."""
    wrong = misregistered(rows, bodies)
    repaired = [m["url"] for m in wrong]
    if not wrong:
        return [], [], 0.0
    if router.put_replaces:
        for m in wrong:
            router.put(m["id"], _with_key(m["payload"], keys.get(m["url"])))
        return repaired, [], 0.0
    for m in wrong:
        router.remove(m["url"], rows)
    gone, elapsed = _wait_rows(router, lambda now: not any(r["url"] in repaired for r in now),
                               timeout, interval, **clock)
    if gone is None:
        raise RouterError("the router %s still lists %s %.0f s after its removal; it cannot be "
                          "added again with its role before that row has gone"
                          % (router.base, ", ".join(repaired), timeout))
    return repaired, repaired, elapsed


def put_back(router, urls, timeout, interval, keys=None, payloads=None, **clock):
    """Add ``urls`` (those not listed yet; ``keys`` maps a URL to the worker's own API key)
    and wait until the router lists each as healthy and ready. A URL the router still
    lists as draining is added once that row has gone. Returns ``{"before", "after",
    "elapsed_s", "added"}``.

    ``payloads`` (``{url: body}``, filter ``router_pd_payloads``; None or empty: the
    router's regular mode, today's calls): a router in PD mode. Each URL is added with its
    body (its role), a URL of ``urls`` without one is refused before anything changes
    (:func:`pd_bodies`), and, before the adds, every row the router lists with another
    role than its body's is put right (:func:`_repair`); the wait then also waits until
    each of ``urls`` and each repaired URL is listed with its role. The answer has
    ``repaired`` (the URLs put right) too."""
    urls = [normalize_url(u) for u in urls]
    keys = dict((normalize_url(k), v) for k, v in (keys or {}).items())
    bodies = pd_bodies(router, payloads, urls)
    before, settle = _wait_rows(router, lambda rows: not leaving(rows, urls), timeout,
                                interval, **clock)
    if before is None:
        raise RouterError("the router %s still lists %s as draining %.0f s after its removal; "
                          "it cannot be added again before that row has gone"
                          % (router.base, ", ".join(leaving(router.workers(), urls)), timeout))
    listed = set(r["url"] for r in before)
    added = [u for u in urls if u not in listed]
    repaired = []
    if bodies is None:
        for u in added:
            router.add(u, keys.get(u))
    else:
        repaired, readd, waited = _repair(router, before, bodies, keys, timeout, interval,
                                          **clock)
        settle += waited
        for u in added + readd:
            router.add(u, keys.get(u), bodies[u])
    watched = urls + [u for u in repaired if u not in urls]

    def routed():
        rows = router.workers()
        ok = set(serving(rows)) if router.api != "legacy" else set(r["url"] for r in rows)
        if bodies is not None and _roles_wrong(rows, watched, bodies):
            return None
        return rows if set(urls) <= ok else None

    after, elapsed = wait_for(routed, timeout, interval, **clock)
    if after is None:
        rows = router.workers()
        wrong = _roles_wrong(rows, watched, bodies) if bodies is not None else []
        if wrong:
            put = router.put_replaces and bool(set(wrong) & set(repaired))
            raise RouterError(
                "the router %s does not list %s with the role of its payload %.0f s after %s: "
                "it lists %s%s" % (
                    router.base, ", ".join(wrong), timeout,
                    "PUT /workers/{id}" if put else "the add", json.dumps(rows),
                    "; a role that a PUT left as it was is a release whose PUT cannot change "
                    "worker_type (smg up to 1.3.3, sglang-router 0.3.x)" if put else ""))
        raise RouterError("the router %s does not route to %s %.0f s after the add: it lists "
                          "%s" % (router.base, ", ".join(urls), timeout, json.dumps(rows)))
    out = {"before": before, "after": after, "elapsed_s": round(settle + elapsed, 3),
           "added": added}
    if bodies is not None:
        out["repaired"] = repaired
    return out


def converge(router, plan, timeout, interval, keys=None, payloads=None, **clock):
    """Apply one router's membership ``plan`` (``_router_fleet.membership``): remove what
    must go and wait until it is gone, then add what is missing and wait until the router
    routes to it. Returns ``{"before", "after", "elapsed_s", "added", "removed"}``.

    With ``payloads`` (see :func:`put_back`; an add without a body is refused before the
    removals), the adds carry each URL's body, and the rows listed with another role are
    put right even when nothing is to be added; the answer has ``repaired`` too."""
    bodies = pd_bodies(router, payloads, plan.get("add") or [])
    before = router.workers()
    removed = [normalize_url(u) for u in plan.get("remove") or []]
    for u in removed:
        router.remove(u, before)
    elapsed = 0.0
    after = before
    if removed:
        after, elapsed = _wait_rows(router, lambda rows: not still_routed(rows, removed),
                                    timeout, interval, **clock)
        if after is None:
            raise RouterError("the router %s still routes to %s %.0f s after the removal"
                              % (router.base, ", ".join(removed), timeout))
    added, repaired = [], []
    if plan.get("add") or misregistered(after, bodies):
        res = put_back(router, plan.get("add") or [], timeout, interval, keys,
                       payloads=payloads, **clock)
        added, after = res["added"], res["after"]
        repaired = res.get("repaired", [])
        elapsed += res["elapsed_s"]
    out = {"before": before, "after": after, "elapsed_s": round(elapsed, 3),
           "added": added, "removed": removed}
    if bodies is not None:
        out["repaired"] = repaired
    return out


def drain(read_metrics, timeout, interval, quiet=DRAIN_QUIET_S, **clock):
    """Wait until the server has no running or queued request. ``read_metrics()`` returns
    the ``/metrics`` text, or None when nothing listens on the server's port (a server
    still loading, or down, has no request to finish). One reading of 0 may be a stale
    report (see :data:`DRAIN_QUIET_S`), so drained means: readings that span at least
    ``quiet`` s (two readings at least) in which the :func:`work_done` counters did not
    move, and the gauges read 0 in all of them, or the release names
    :data:`PER_FORWARD_COUNTER` (then a gauge above 0 is a stale report: no forward ran);
    on a PD server, its queues (:data:`PD_QUEUE_GAUGES`) read 0 too.
    Returns ``{"drained", "elapsed_s", "running",
    "queued", "listening", "quiet_s", "busy"}`` (``quiet_s``: how long the last readings
    were quiet; ``busy``: the most requests, running, queued and in the PD queues, that a
    reading showed: what the drain waited for)."""
    now = clock.get("clock", time.monotonic)
    last = {"busy": 0}
    streak = {}  # the first quiet reading: its time and counters

    def idle():
        text = read_metrics()
        if text is None:
            last.update(running=0, queued=0, listening=False, quiet_s=0.0)
            return True
        done, running, queued = is_drained(text)
        in_pd_queues = int(pd_queued(text) or 0)
        last.update(running=running, queued=queued, listening=True, quiet_s=0.0,
                    busy=max(last["busy"], int(running + queued) + in_pd_queues))
        work = work_done(text)
        idle_reading = (done or PER_FORWARD_COUNTER in text) and not in_pd_queues
        if not idle_reading or streak.get("work") != work:
            streak.clear()
            if idle_reading:
                streak.update(at=now(), work=work)
            return False
        quiet_s = now() - streak["at"]
        last["quiet_s"] = round(quiet_s, 3)
        return quiet_s >= quiet

    done, elapsed = wait_for(idle, timeout, interval, **clock)
    return {"drained": bool(done), "elapsed_s": elapsed, "running": last.get("running"),
            "queued": last.get("queued"), "listening": last.get("listening"),
            "quiet_s": last.get("quiet_s"), "busy": last["busy"]}


def worker_urls(servers, groups, hostvars, default_port=30000):
    """The router's ``--worker-urls`` from the inventory: one URL per server, a multi-node
    server's being its rank 0's. ``servers`` lists the server hosts; ``hostvars[h]`` may set
    ``sglang_router_worker_url`` (else ``http://<sglang_node_address, ansible_host or the
    name>:<server_port>``), ``sglang_nnodes``, ``sglang_server_group`` and
    ``sglang_node_rank`` (the deploy path's own multi-node inputs)."""
    from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _topology

    urls = []
    for host in servers:
        hv = hostvars[host]
        nnodes = int(hv.get("sglang_nnodes") or 1)
        if nnodes > 1:
            try:
                members = _topology.check_group(nnodes, hv.get("sglang_server_group"),
                                                groups, host)
                rank_map = _topology.ranks(members, dict(
                    (m, hostvars[m].get("sglang_node_rank")) for m in members))
            except _topology.TopologyError as exc:
                raise RouterError("router_worker_urls from the inventory: %s: %s" % (host, exc))
            if rank_map[host] != 0:
                continue
        url = hv.get("sglang_router_worker_url") or "http://%s:%s" % (
            hv.get("sglang_node_address") or hv.get("ansible_host") or host,
            hv.get("server_port") or default_port)
        urls.append(normalize_url(url))
    return urls
