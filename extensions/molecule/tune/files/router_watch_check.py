"""Figures of the router watch (test only): did any trial host take user traffic while
its trial ran?

    python router_watch_check.py --watch router.jsonl --journals j1.jsonl,j2.jsonl \
        --urls h1=http://...,h2=http://... --min-serving 1

A trial's window is its journal line's ``started`` (when the trial began, to the
millisecond) to ``started + wall_s`` (its load to its journal line; the line's ``time`` is
cut to the second, so a window from it reached up to a second before the trial began or
after its line, where the host may still or again be routed: seen once in a full run).
A look inside a window that lists the trial's host as routed (healthy and not draining:
smg sends a draining worker nothing) is a violation. The control: every host is seen routed
at some look outside its trials (the watch can see a trial host when it does route to it).
Prints one JSON document.
"""

import argparse
import json

LEAVING = ("draining", "removing")


def _lines(path):
    with open(path, encoding="utf-8") as handle:
        out = []
        for line in handle:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line cut by the stop
        return out


def routed(look):
    return {w["url"] for w in look.get("workers") or []
            if w.get("healthy") and w.get("status") not in LEAVING}


def check(looks, trials, urls, min_serving):
    """``trials``: [{"host", "start", "end", "id"}]; ``urls``: host -> worker URL."""
    host_of = dict((u.rstrip("/"), h) for h, u in urls.items())
    windows = [t for t in trials if t["host"] in urls]
    good = [k for k in looks if "workers" in k]
    violations, in_trials, fewest = [], 0, None
    seen_outside = set()
    for look in good:
        now = routed(look)
        hosts_now = {host_of[u] for u in now if u in host_of}
        during = [t for t in windows if t["start"] <= look["t"] <= t["end"]]
        if during:
            in_trials += 1
            fewest = len(now) if fewest is None else min(fewest, len(now))
        busy = {t["host"] for t in during}
        for t in during:
            if t["host"] in hosts_now:
                violations.append({"t": look["t"], "host": t["host"], "trial": t["id"]})
        seen_outside |= hosts_now - busy
    return {
        "looks": len(looks), "looks_failed": len(looks) - len(good),
        "looks_in_trials": in_trials, "trials": len(windows),
        "trial_host_routed": violations,
        "fewest_routed_in_trials": fewest, "min_serving": min_serving,
        "hosts_seen_routed": sorted(seen_outside),
    }


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--watch", required=True)
    ap.add_argument("--journals", required=True)
    ap.add_argument("--urls", required=True)
    ap.add_argument("--min-serving", type=int, default=1)
    args = ap.parse_args(argv)
    urls = dict(pair.split("=", 1) for pair in args.urls.split(","))
    trials = []
    for path in args.journals.split(","):
        for line in _lines(path):
            if line.get("kind") == "trial" and line.get("started") is not None \
                    and line.get("wall_s") is not None:
                start = float(line["started"])  # to the millisecond
                trials.append({"host": line["host"], "id": line["candidate"]["id"],
                               "start": start, "end": start + float(line["wall_s"])})
    print(json.dumps(check(_lines(args.watch), trials, urls, args.min_serving)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
