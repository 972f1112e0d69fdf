"""The active targets of a real Prometheus, in the figures the monitoring scenario checks
(issue 47: the Jinja that dug through /api/v1/targets with map, unique and groupby, with
unit tests).

    targets.py --prometheus URL --expect N

Reads ``GET URL/api/v1/targets?state=active`` once and prints one JSON object:
``status`` (the HTTP status; -1 when Prometheus did not answer, with ``error``), ``count``
(the active targets), ``healths`` (their distinct ``health`` values, first seen first),
``ready`` (status 200, ``count`` N and every target ``up``), ``jobs`` (each ``job`` label ->
``count``: its targets, ``labels``: label name -> the distinct values its targets carry,
sorted; a label a target lacks counts as null) and ``labels`` (each target's labels, to
show). Exits 0 whatever Prometheus answered: the task that calls it retries until ready.
"""

import argparse
import json
import sys
import urllib.error
import urllib.request


def fetch(url, timeout=5):
    """``(HTTP status, JSON document or None, error or None)``; no proxy (loopback)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as resp:
            status, body = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return -1, None, str(exc)
    try:
        return status, json.loads(body.decode("utf-8", "replace")), None
    except ValueError as exc:
        return status, None, "not JSON: %s" % exc


def _sorted(values):
    return sorted(values, key=lambda v: (v is None, str(v)))


def figures(status, doc, expect, error=None):
    data = doc.get("data") if isinstance(doc, dict) else None
    active = (data or {}).get("activeTargets") if isinstance(data, dict) else None
    if not isinstance(active, list):
        active = []
        if error is None and status == 200:
            error = "no data.activeTargets in the answer: %s" % (str(doc)[:300],)
    labels = [t.get("labels") or {} for t in active]
    healths = []
    for target in active:
        if target.get("health") not in healths:
            healths.append(target.get("health"))
    jobs = {}
    names = sorted(set(name for one in labels for name in one))
    for one in labels:
        job = jobs.setdefault(str(one.get("job")), {"count": 0, "labels": {}})
        job["count"] += 1
        for name in names:
            values = job["labels"].setdefault(name, [])
            if one.get(name) not in values:
                values.append(one.get(name))
    for job in jobs.values():
        job["labels"] = dict((name, _sorted(values)) for name, values in job["labels"].items())
    out = {"status": status, "count": len(active), "healths": healths,
           "ready": status == 200 and len(active) == expect and healths == ["up"],
           "jobs": jobs, "labels": labels}
    if error is not None:
        out["error"] = error
    return out


def main(argv=None, get=fetch):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--prometheus", required=True, help="Prometheus' base URL")
    parser.add_argument("--expect", type=int, required=True, help="how many active targets there must be")
    args = parser.parse_args(argv)
    status, doc, error = get(args.prometheus.rstrip("/") + "/api/v1/targets?state=active")
    json.dump(figures(status, doc, args.expect, error), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
