#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: router_worker
short_description: Take SGLang servers out of SGLang's router, drain them, put them back
version_added: 0.3.0
author: gpufleet developers (@gpufleet)
description:
  - Drives the worker API of SGLang's router (PyPI C(smg) 1.x and C(sglang-router) 0.3.x
    C(POST/GET/DELETE /workers); C(sglang-router) up to 0.2.1 C(/add_worker),
    C(/remove_worker), C(/list_workers)) for a drain-aware switch of the servers behind it.
  - With O(state=absent), first refuses (and changes nothing) when taking O(urls) out would
    leave fewer than O(min_serving) healthy workers in the router; else removes them and
    waits until the router routes to none of them (each is gone, or listed as C(draining);
    smg keeps a removed worker so for about 5 s and routes no new request to it).
  - With O(state=drained), reads the server's SGLang V(/metrics) at O(metrics_url) until
    C(sglang:num_running_reqs) and C(sglang:num_queue_reqs) read 0 over 3 s at least (two
    reads or more) while its progress counters (tokens, finished requests) do not move;
    the release sets those gauges only when its scheduler reports, so one 0 can be stale. Up
    to O(drain_timeout) s; on a timeout it fails or goes on, as O(on_drain_timeout) says. A
    refused connection (nothing listens on the port, so the server is still loading or
    down) counts as drained.
  - With O(state=present), adds those of O(urls) the router does not list and waits until
    it lists every one as healthy and ready (routable). A URL still listed as C(draining) is
    added once that row has gone (smg refuses a duplicate).
  - With O(state=converged), makes the router's membership what it should be. Each of O(urls)
    whose C(/health) answers 200 (asked from the router's host) and that is not in O(held) is
    added and waited for until the router routes to it; each that is down or held is removed
    and waited for until the router routes to it no more; URLs not in O(urls) are left alone. In
    check mode it only reports (RV(membership), one row per URL).
  - With O(state=restored), puts back and never removes. Each of O(urls) (the servers that
    serve what this run deploys, the caller's verdict) that the router does not list (a
    C(draining) row counts as not listed), that is not in O(held) and whose C(/health)
    answers 200 (asked from the router's host, as O(state=converged) does) is added and
    waited for until the router routes to it. Only the URLs the router does not list are
    asked for their health, so a router that lists every one costs one request. The server
    role runs it once, on every router, before the first batch of a rollout leaves. In
    check mode it only reports (RV(unlisted), RV(added), RV(not_ready)).
  - The router does not keep workers across its own restart; the router role's
    C(--worker-urls) does.
  - With O(payloads) (a router in PD mode), O(state=present), O(state=converged) and
    O(state=restored) add each worker with its role (C(POST /workers) with its body), refuse
    (before any change) a URL of O(urls) that has no body, and first put right each worker
    the router lists with another role or bootstrap port than its body says (a worker added
    with its URL alone is a C(regular) one, to which a PD router routes nothing) with
    C(PUT /workers/{id}) and its body, which smg (from 1.4.0) takes as a new registration
    under the same id; RV(repaired) names them. They then wait until each is listed with its
    role.
extends_documentation_fragment:
  - gpufleet.sglang._attributes
attributes:
  check_mode:
    support: full
    details:
      - Reads the router's worker list and checks O(min_serving); adds, removes and waits
        for nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - O(state=present) and O(state=restored) add only the URLs the router does not list;
        O(state=absent) removes only listed ones; with O(payloads), only a worker listed with
        another role than its body's is put right.
seealso:
  - module: gpufleet.sglang.server_unit
    description: Its check-mode result tells whether a host will restart (and so needs draining).
  - module: gpufleet.sglang.server_health
    description: Wait until the switched server is ready before it is put back.
  - ref: gpufleet.sglang.router <ansible_collections.gpufleet.sglang.router_role>
    description: The role gpufleet.sglang.router that installs and runs the router.
options:
  router_url:
    description: Base URL of the router, e.g. V(http://127.0.0.1:30000).
    type: str
    default: http://127.0.0.1:30000
  api:
    description:
      - The router's worker API. V(auto) asks C(GET /workers) and falls back to
        C(GET /list_workers).
    type: str
    choices: [auto, workers, legacy]
    default: auto
  api_key:
    description: The router's API key (sent as a bearer token).
    type: str
  urls:
    description: Worker URLs (a server's rank 0, V(http://host:port)).
    type: list
    elements: str
    default: []
  state:
    description: What to do, see the description.
    type: str
    choices: [absent, drained, present, converged, restored]
    required: true
  held:
    description: With O(state=converged) or O(state=restored), the worker URLs that are held out on purpose.
    type: list
    elements: str
    default: []
  unit_path:
    description:
      - With O(state=converged) or O(state=restored), the router's systemd unit on its host. When the router cannot be
        reached and this file does not exist, the router is not installed yet (a first deploy
        before the router role), so nothing is done and RV(skipped_reason) says so.
    type: path
  router_name:
    description: The router's name in messages (its inventory host).
    type: str
    default: ''
  worker_api_keys:
    description:
      - The servers' own API keys by worker URL; an added worker is given its key (smg's
        C(api_key) of C(POST /workers)) so that the router calls it with that key. With
        O(payloads), the key goes into the worker's body (the add's and the C(PUT)'s).
    type: dict
    default: {}
  payloads:
    description:
      - The router's PD workers, for a router in PD mode (C(--pd-disaggregation)), with
        O(state=present), O(state=converged) or O(state=restored) (the other states ignore it).
        A mapping of worker URL to the body of C(POST /workers) that adds it with its role
        (C(url), C(worker_type) V(prefill) or V(decode), and C(bootstrap_port) on a prefill
        worker that has one), as the filter
        P(gpufleet.sglang.router_pd_payloads#filter) renders it from
        C(router_pd_workers).
      - Unset or empty, the router is in its regular mode and each worker is added with its
        URL alone.
      - A body must not carry the worker's C(api_key) (this option is not secret, so it would
        be logged); give the keys with O(worker_api_keys) and render the bodies without them.
    type: dict
  min_serving:
    description: With O(state=absent), the fewest healthy workers the router must keep.
    type: int
    default: 1
  metrics_url:
    description: With O(state=drained), the server's V(/metrics) URL.
    type: str
  drain_timeout:
    description: With O(state=drained), seconds to wait for the server to go idle.
    type: float
    default: 600
  on_drain_timeout:
    description: With O(state=drained), V(fail) or V(continue) when the server is not idle in time.
    type: str
    choices: [fail, continue]
    default: fail
  timeout:
    description: Seconds to wait for the router to list or drop the workers.
    type: float
    default: 120
  interval:
    description: Seconds between polls.
    type: float
    default: 0.5
  request_timeout:
    description: Seconds one HTTP request may take.
    type: float
    default: 10
"""

EXAMPLES = r"""
- name: Take this server out of the router
  gpufleet.sglang.router_worker:
    router_url: http://10.0.0.9:30000
    urls: [http://10.0.0.1:30000]
    state: absent
    min_serving: 1
  delegate_to: router-1

- name: Wait until the server has no request left
  gpufleet.sglang.router_worker:
    state: drained
    metrics_url: http://127.0.0.1:30000/metrics
    drain_timeout: 300
"""

RETURN = r"""
api:
  description: The worker API used.
  type: str
  returned: when the router was asked
  sample: workers
workers_before:
  description:
    - The router's workers before the call (C(id), C(url), C(healthy), C(status); and
      C(worker_type) and C(bootstrap_port) where the router lists them, as smg does).
  type: list
  elements: dict
  returned: when the router was asked
workers_after:
  description: The router's workers at the end.
  type: list
  elements: dict
  returned: when the router was asked
removed:
  description: URLs removed.
  type: list
  elements: str
  returned: O(state=absent) or O(state=converged)
added:
  description: URLs added.
  type: list
  elements: str
  returned: O(state=present), O(state=converged) or O(state=restored)
repaired:
  description:
    - With O(payloads), the URLs whose worker the router listed with another role or
      bootstrap port than its body says, and that were put right (in check mode, that would
      be).
  type: list
  elements: str
  returned: when one was
unlisted:
  description: With O(state=restored), those of O(urls) the router did not list before the call.
  type: list
  elements: str
  returned: O(state=restored)
not_ready:
  description:
    - With O(state=restored), each URL the router did not list and that was not put back, with the
      reason (C(url), C(reason)).
  type: list
  elements: dict
  returned: O(state=restored)
skipped_reason:
  description: Why nothing was done (O(state=converged) or O(state=restored), the router is not installed yet).
  type: str
  returned: when nothing was done
membership:
  description:
    - With O(state=converged), one row per URL of O(urls) as the router saw it before the
      call (C(router), C(url), C(listed), C(healthy_in_router), C(serving), C(held),
      C(problem), empty or what is wrong).
  type: list
  elements: dict
  returned: O(state=converged)
drained:
  description: Whether the server went idle in time.
  type: bool
  returned: O(state=drained)
running:
  description: Running requests at the last read.
  type: int
  returned: O(state=drained)
queued:
  description: Queued requests at the last read.
  type: int
  returned: O(state=drained)
listening:
  description: Whether the server answered on its port at the last read (false, with 0 running and queued, when the connection was refused).
  type: bool
  returned: O(state=drained)
quiet_s:
  description: How long the last reads showed the server idle (0 gauges, counters still).
  type: float
  returned: O(state=drained)
busy:
  description: The most requests, running and queued, that one read showed during the wait (what the drain waited for).
  type: int
  returned: O(state=drained)
elapsed_s:
  description: Seconds the wait took.
  type: float
  returned: always
"""

import os
import time
import urllib.error

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router
from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router_fleet


def fetch(method, url, body, headers, timeout):
    """One HTTP call: ``(status, text)``; ``OSError`` when nothing answers."""
    try:
        resp = open_url(url, data=body.encode() if body is not None else None,
                        headers=headers, method=method, timeout=timeout,
                        follow_redirects="none")
        return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def probe(url, timeout):
    """Whether the worker answers ``/health`` with 200 (open without a key on SGLang)."""
    try:
        status, _text = fetch("GET", _router.normalize_url(url) + "/health", None, {}, timeout)
    except OSError:
        return False
    return status == 200


def detect_api(base, headers, timeout):
    status, _text = fetch("GET", base + "/workers", None, headers, timeout)
    if status == 200:
        return "workers"
    if status in (404, 405):
        status2, _t = fetch("GET", base + "/list_workers", None, headers, timeout)
        if status2 == 200:
            return "legacy"
    raise _router.RouterError("cannot tell the worker API of the router %s: GET /workers "
                              "answered %s" % (base, status))


def _repaired(urls):
    """``{"repaired": urls}`` when a row was put right, else nothing (the result of a
    router in its regular mode is what it was before PD mode)."""
    return {"repaired": urls} if urls else {}


def refuse_keys_in_payloads(module, payloads):
    """A worker's key must come through ``worker_api_keys`` (no_log), not inside a body of
    ``payloads``, which is not secret: refuse, with the key masked in the result."""
    keyed = []
    for url, body in sorted((payloads or {}).items()):
        if isinstance(body, dict) and body.get("api_key"):
            module.no_log_values.add(str(body["api_key"]))
            keyed.append(url)
    if keyed:
        module.fail_json(msg="payloads: the body of %s carries an api_key; payloads is not a "
                             "secret option, so give the servers' keys with worker_api_keys "
                             "and render the bodies without them (router_pd_payloads with no "
                             "keys)" % ", ".join(keyed))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            router_url=dict(type="str", default="http://127.0.0.1:30000"),
            api=dict(type="str", choices=["auto", "workers", "legacy"], default="auto"),
            api_key=dict(type="str", no_log=True),
            urls=dict(type="list", elements="str", default=[]),
            state=dict(type="str", choices=["absent", "drained", "present", "converged",
                                            "restored"],
                       required=True),
            held=dict(type="list", elements="str", default=[]),
            worker_api_keys=dict(type="dict", default={}, no_log=True),
            payloads=dict(type="dict"),
            unit_path=dict(type="path"),
            router_name=dict(type="str", default=""),
            min_serving=dict(type="int", default=1),
            metrics_url=dict(type="str"),
            drain_timeout=dict(type="float", default=600),
            on_drain_timeout=dict(type="str", choices=["fail", "continue"], default="fail"),
            timeout=dict(type="float", default=120),
            interval=dict(type="float", default=0.5),
            request_timeout=dict(type="float", default=10),
        ),
        required_if=[("state", "drained", ["metrics_url"])],
        supports_check_mode=True,
    )
    p = module.params
    refuse_keys_in_payloads(module, p["payloads"])
    start = time.monotonic()
    named = ("router %s: " % p["router_name"]) if p["router_name"] else ""
    try:
        if p["state"] == "drained":
            if module.check_mode:
                module.exit_json(changed=False, drained=None, running=None, queued=None,
                                 elapsed_s=0.0)

            def read_metrics():
                try:
                    status, text = fetch("GET", p["metrics_url"], None, {},
                                         p["request_timeout"])
                except OSError as exc:
                    # nothing listens (a server still loading, or down): nothing to drain
                    if isinstance(getattr(exc, "reason", exc), ConnectionRefusedError):
                        return None
                    raise _router.RouterError("cannot read %s: %s" % (p["metrics_url"], exc))
                if status != 200:
                    raise _router.RouterError("%s answered %s" % (p["metrics_url"], status))
                return text

            res = _router.drain(read_metrics, p["drain_timeout"], p["interval"])
            if not res["drained"] and p["on_drain_timeout"] == "fail":
                module.fail_json(msg="the server at %s still had %s running and %s queued "
                                     "request(s) after drain_timeout=%s s "
                                     "(on_drain_timeout=fail)"
                                     % (p["metrics_url"], res["running"], res["queued"],
                                        p["drain_timeout"]), **res)
            module.exit_json(changed=False, **res)

        base = _router.normalize_url(p["router_url"])
        headers = {"Authorization": "Bearer " + p["api_key"]} if p["api_key"] else {}
        api = p["api"]
        if api == "auto":
            api = detect_api(base, headers, p["request_timeout"])
        router = _router.Router(base, api, fetch, p["api_key"], p["request_timeout"])
        urls = [_router.normalize_url(u) for u in p["urls"]]
        keys = dict((_router.normalize_url(k), v) for k, v in p["worker_api_keys"].items() if v)
        # a router in PD mode (None: the regular mode, today's calls); absent takes no role
        payloads = (p["payloads"] or None) if p["state"] != "absent" else None
        if p["state"] == "converged":
            rows = router.workers()
            healthy = dict((u, probe(u, p["request_timeout"])) for u in urls)
            plan = _router_fleet.membership(urls, p["held"], healthy, rows, payloads)
            report = _router_fleet.membership_report(base, rows, urls, p["held"], healthy)
            if module.check_mode:
                module.exit_json(changed=bool(plan["add"] or plan["remove"] or plan.get("repair")),
                                 api=api, workers_before=rows, workers_after=rows,
                                 added=plan["add"], removed=plan["remove"], membership=report,
                                 elapsed_s=0.0, **_repaired(plan.get("repair")))
            res = _router.converge(router, plan, p["timeout"], p["interval"], keys,
                                   payloads=payloads)
            module.exit_json(changed=bool(res["added"] or res["removed"] or res.get("repaired")),
                             api=api, workers_before=res["before"], workers_after=res["after"],
                             added=res["added"], removed=res["removed"], membership=report,
                             elapsed_s=res["elapsed_s"], **_repaired(res.get("repaired")))
        if p["state"] == "restored":
            # only the servers the router does not list are asked: none on a plain re-run
            res = _router_fleet.put_back_unlisted(
                router, urls, p["held"], lambda u: probe(u, p["request_timeout"]), p["timeout"],
                p["interval"], keys, check=module.check_mode, payloads=payloads)
            module.exit_json(changed=bool(res["added"] or res.get("repaired")), api=api,
                             workers_before=res["before"], workers_after=res["after"],
                             added=res["added"], unlisted=res["unlisted"],
                             not_ready=res["not_ready"], elapsed_s=res["elapsed_s"],
                             **_repaired(res.get("repaired")))
        if module.check_mode:
            bodies = _router.pd_bodies(router, payloads, urls)
            rows = router.workers()
            listed = set(_router.still_routed(rows, urls))
            if p["state"] == "absent":
                _router.check_min_serving(rows, urls, p["min_serving"])
                todo = [u for u in urls if u in listed]
            else:
                todo = [u for u in urls if u not in listed]
            repaired = [m["url"] for m in _router.misregistered(rows, bodies)]
            module.exit_json(changed=bool(todo or repaired), api=api, workers_before=rows,
                             workers_after=rows, elapsed_s=0.0, **dict(
                                 _repaired(repaired),
                                 **{"removed" if p["state"] == "absent" else "added": todo}))
        if p["state"] == "absent":
            res = _router.take_out(router, urls, p["min_serving"], p["timeout"], p["interval"])
            module.exit_json(changed=bool(res["removed"]), api=api,
                             workers_before=res["before"], workers_after=res["after"],
                             removed=res["removed"], elapsed_s=res["elapsed_s"])
        res = _router.put_back(router, urls, p["timeout"], p["interval"], keys, payloads=payloads)
        module.exit_json(changed=bool(res["added"] or res.get("repaired")), api=api,
                         workers_before=res["before"], workers_after=res["after"],
                         added=res["added"], elapsed_s=res["elapsed_s"],
                         **_repaired(res.get("repaired")))
    except _router.RouterError as exc:
        module.fail_json(msg=named + str(exc), elapsed_s=round(time.monotonic() - start, 3))
    except OSError as exc:
        if p["state"] in ("converged", "restored") and p["unit_path"] \
                and not os.path.exists(p["unit_path"]):
            module.exit_json(changed=False, skipped_reason="the router is not installed yet (no "
                             "%s)" % p["unit_path"], membership=[], added=[], removed=[],
                             unlisted=[], not_ready=[], elapsed_s=0.0)
        module.fail_json(msg="%scannot reach the router at %s: %s" % (named, p["router_url"], exc),
                         elapsed_s=round(time.monotonic() - start, 3))


if __name__ == "__main__":
    main()
