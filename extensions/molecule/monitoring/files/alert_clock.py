"""Do one thing to the fleet, then time an alert of a real Prometheus (test bed only).

    alert_clock.py --prometheus URL --alert NAME --host HOST --until firing|cleared \
        --timeout S ACTION ARG...

ACTION: ``stop CONTAINER`` / ``start CONTAINER`` (systemctl on the server's unit inside
the container), ``remove ROUTER WORKER`` / ``add ROUTER WORKER`` (the router's /workers
API, by hand), ``none``. ``t0`` is taken when the action has returned (a stopped server has
exited, a removed worker is gone from the router's list). Prints one JSON line: elapsed_s
from t0 until /api/v1/alerts first showed the alert in that state, the action's own
seconds, and the other alerts seen firing meanwhile.
"""

import argparse
import json
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


def alerts(prometheus):
    status, doc = http("GET", prometheus + "/api/v1/alerts")
    return doc["data"]["alerts"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--alert", required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--until", choices=["firing", "cleared"], required=True)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("action")
    ap.add_argument("args", nargs="*")
    opts = ap.parse_args()
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
                              "labels": mine[0]["labels"] if mine else None}))
            return 0
        if now - t0 > opts.timeout:
            print(json.dumps({"alert": opts.alert, "host": opts.host, "until": opts.until,
                              "timed_out": True, "elapsed_s": round(now - t0, 2),
                              "firing_seen": sorted(seen_firing), "alerts": current}))
            return 1
        time.sleep(0.25)


if __name__ == "__main__":
    sys.exit(main())
