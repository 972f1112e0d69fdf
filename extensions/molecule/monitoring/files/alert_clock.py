"""Do one thing to the fleet, then time an alert of a real Prometheus (test bed only).

    alert_clock.py --prometheus URL --alert NAME --host HOST --until firing|cleared \
        --timeout S ACTION ARG...

ACTION: ``stop CONTAINER`` / ``start CONTAINER`` (systemctl on the server's unit inside
the container), ``remove ROUTER WORKER`` / ``add ROUTER WORKER`` (the router's /workers
API, by hand), ``none``. ``t0`` is taken when the action has returned (a stopped server has
exited, a removed worker is gone from the router's list). Prints one JSON line: elapsed_s
from t0 until /api/v1/alerts first showed the alert in that state, the action's own
seconds, and the other alerts seen firing meanwhile.

With ``--for D`` (the alert rule's for:, a Prometheus duration such as 10s or 1m30s) the
line also holds ``for_s``, and with ``--scrape-interval`` and ``--evaluation-interval`` too,
``bound_s``: for + one scrape + one evaluation + 1 s of polling, the latest the alert may
fire (issue 47: the durations were parsed in the scenario's Jinja, where 1m read as 0).
"""

import argparse
import json
import re
import subprocess
import sys
import time
import urllib.request


def http(method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        text = resp.read().decode()
        return resp.status, (json.loads(text) if text.strip().startswith(("{", "[")) else text)


def act(action, args):
    if action in ("stop", "start"):
        subprocess.run(["podman", "exec", args[0], "systemctl", action, "sglang"], check=True)
    elif action == "remove":
        router, worker = args
        status, listing = http("GET", router + "/workers")
        ids = [w["id"] for w in listing["workers"] if w["url"].rstrip("/") == worker.rstrip("/")]
        if not ids:
            sys.exit("the router does not list %s: %s" % (worker, listing))
        for wid in ids:
            http("DELETE", "%s/workers/%s" % (router, wid))
        deadline = time.monotonic() + 30
        while any(w["url"].rstrip("/") == worker.rstrip("/")
                  for w in http("GET", router + "/workers")[1]["workers"]):
            if time.monotonic() > deadline:
                sys.exit("the router still lists %s 30 s after DELETE" % worker)
            time.sleep(0.2)
    elif action == "add":
        router, worker = args
        http("POST", router + "/workers", {"url": worker})
    elif action != "none":
        sys.exit("unknown action %s" % action)


# Prometheus' duration: units from the largest, each at most once (model.ParseDuration)
DURATION = re.compile(r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$")
UNIT_S = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)


def duration_s(text):
    """Seconds of a Prometheus duration (``10s``, ``1m30s``, ``500ms``, ``0``)."""
    text = str(text).strip()
    if text == "0":
        return 0
    match = DURATION.match(text)
    if not text or not match:
        raise argparse.ArgumentTypeError("%r is not a Prometheus duration such as 10s or 1m30s" % text)
    seconds = sum(int(n) * unit for n, unit in zip(match.groups(), UNIT_S) if n is not None)
    return int(seconds) if seconds == int(seconds) else seconds


def bounds(for_s, scrape_s=None, evaluation_s=None):
    """``for_s``, and ``bound_s`` (for + one scrape + one evaluation + 1 s of polling) when
    both intervals are given; {} without for."""
    if for_s is None:
        return {}
    out = {"for_s": for_s}
    if scrape_s is not None and evaluation_s is not None:
        out["bound_s"] = for_s + scrape_s + evaluation_s + 1
    return out


def alerts(prometheus):
    status, doc = http("GET", prometheus + "/api/v1/alerts")
    return doc["data"]["alerts"]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--alert", required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--until", choices=["firing", "cleared"], required=True)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--for", dest="for_s", type=duration_s, help="the rule's for: (a Prometheus duration)")
    ap.add_argument("--scrape-interval", dest="scrape_s", type=duration_s)
    ap.add_argument("--evaluation-interval", dest="evaluation_s", type=duration_s)
    ap.add_argument("action")
    ap.add_argument("args", nargs="*")
    opts = ap.parse_args(argv)
    limits = bounds(opts.for_s, opts.scrape_s, opts.evaluation_s)
    started = time.monotonic()
    act(opts.action, opts.args)
    t0 = time.monotonic()
    seen_firing = set()
    pending_at = None
    while True:
        now = time.monotonic()
        current = alerts(opts.prometheus)
        for a in current:
            if a["state"] == "firing":
                seen_firing.add("%s/%s" % (a["labels"].get("alertname"), a["labels"].get("host")))
        mine = [a for a in current if a["labels"].get("alertname") == opts.alert
                and a["labels"].get("host") == opts.host]
        if pending_at is None and any(a["state"] == "pending" for a in mine):
            pending_at = now - t0
        done = (any(a["state"] == "firing" for a in mine) if opts.until == "firing"
                else not mine)
        if done:
            print(json.dumps({"alert": opts.alert, "host": opts.host, "until": opts.until,
                              "elapsed_s": round(now - t0, 2),
                              "pending_after_s": None if pending_at is None else round(pending_at, 2),
                              "action_s": round(t0 - started, 2),
                              "firing_seen": sorted(seen_firing),
                              "labels": mine[0]["labels"] if mine else None, **limits}))
            return 0
        if now - t0 > opts.timeout:
            print(json.dumps({"alert": opts.alert, "host": opts.host, "until": opts.until,
                              "timed_out": True, "elapsed_s": round(now - t0, 2),
                              "firing_seen": sorted(seen_firing), "alerts": current, **limits}))
            return 1
        time.sleep(0.25)


if __name__ == "__main__":
    sys.exit(main())
