"""Watch what every router routes to, and judge the order afterwards (issue 43, item 5).

``watch``: polls each router's ``GET /workers`` every ``--interval`` s until ``--until-file``
appears (or ``--max-seconds`` pass) and appends one JSON line per router and poll to
``--out``: ``{"t": monotonic seconds, "router": name, "ok": bool, "routed": [url, ...]}``,
``routed`` being the workers the router routes to (healthy, not ``draining``/``removing``,
as _router.serving counts them).

``verdict``: reads those lines and prints JSON about the killed server (``--killed``, out of
every router when the watch began) and the others (``--other``):

* ``back_at``: the first time every router routed to the killed server;
* ``first_other_out_at``: the first time some router did not route to one of the others;
* ``overlap``: polls (router, time, the others it did not route to) in which a router
  routed to neither the killed server nor every other one: what the put-back before the
  first batch must make empty; ``overlap_count`` counts them;
* ``killed_out_at_start``: whether the first poll of each router showed the killed server
  out (the test's precondition); ``samples``: how many polls were read.
"""

import argparse
import json
import os
import sys
import time
import urllib.request

LEAVING = ("draining", "removing")


def routed(payload):
    return sorted(w.get("url", "").rstrip("/") for w in (payload or {}).get("workers") or []
                  if w.get("is_healthy") and w.get("status") not in LEAVING)


def watch(args):
    routers = [item.split("=", 1) for item in args.router]
    key = os.environ.get(args.api_key_env or "", "")
    headers = {"Authorization": "Bearer " + key} if key else {}
    end = time.monotonic() + args.max_seconds
    with open(args.out, "a", encoding="utf-8") as out:
        while not os.path.exists(args.until_file) and time.monotonic() < end:
            for name, url in routers:
                line = {"t": round(time.monotonic(), 3), "router": name, "ok": False, "routed": []}
                try:
                    req = urllib.request.Request(url.rstrip("/") + "/workers", headers=headers)
                    with urllib.request.urlopen(req, timeout=2) as resp:
                        line.update(ok=True, routed=routed(json.loads(resp.read().decode())))
                except (OSError, ValueError):
                    pass
                out.write(json.dumps(line) + "\n")
                out.flush()
            time.sleep(args.interval)


def judge(lines, killed, others):
    killed = killed.rstrip("/")
    others = [o.rstrip("/") for o in others]
    samples = [s for s in lines if s.get("ok")]
    names = sorted(set(s["router"] for s in samples))
    last = {}
    back_at = first_out = None
    overlap = []
    first_seen = {}
    for s in samples:
        last[s["router"]] = s["routed"]
        first_seen.setdefault(s["router"], s["routed"])
        out_others = [o for o in others if o not in s["routed"]]
        if out_others and first_out is None:
            first_out = s["t"]
        if killed not in s["routed"] and out_others:
            overlap.append({"t": s["t"], "router": s["router"], "out": out_others})
        if back_at is None and len(last) == len(names) and all(killed in r for r in last.values()):
            back_at = s["t"]
    return {"samples": len(samples), "routers": names, "back_at": back_at,
            "first_other_out_at": first_out, "overlap_count": len(overlap), "overlap": overlap[:10],
            "killed_out_at_start": bool(first_seen) and all(killed not in r for r in first_seen.values())}


def main(argv=None):
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("watch")
    w.add_argument("--router", action="append", required=True, help="NAME=URL")
    w.add_argument("--until-file", required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--interval", type=float, default=0.2)
    w.add_argument("--max-seconds", type=float, default=900)
    w.add_argument("--api-key-env", default="")
    v = sub.add_parser("verdict")
    v.add_argument("--samples", required=True)
    v.add_argument("--killed", required=True)
    v.add_argument("--other", action="append", default=[])
    args = parser.parse_args(argv)
    if args.cmd == "watch":
        watch(args)
        return 0
    with open(args.samples, encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle if line.strip()]
    json.dump(judge(lines, args.killed, args.other), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
