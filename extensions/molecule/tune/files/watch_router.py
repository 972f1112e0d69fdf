"""Watch which workers a router routes to, for the tune scenario (test only).

Every ``--interval`` seconds, ``GET <url>/workers``; one JSON line per look in ``--out``:
``{"t": <epoch seconds>, "workers": [{"url", "healthy", "status"}]}`` (or ``"error"``).
Bounded: it stops when ``--until-file`` exists or after ``--max-seconds``. Standard
library only (it runs on the controller, beside the load client).

    python watch_router.py --url http://10.88.0.5:30000 --until-file STOP --out FILE
"""

import argparse
import json
import os
import time
import urllib.request


def look(url, timeout):
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/workers", timeout=timeout) as answer:
            payload = json.loads(answer.read().decode("utf-8"))
    except (OSError, ValueError) as exc:
        return {"error": str(exc)}
    rows = []
    for worker in payload.get("workers") or []:
        rows.append({"url": (worker.get("url") or "").rstrip("/"),
                     "healthy": bool(worker.get("is_healthy")),
                     "status": worker.get("status")})
    return {"workers": rows}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--until-file", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--max-seconds", type=float, default=1800)
    args = ap.parse_args(argv)
    end = time.monotonic() + args.max_seconds
    with open(args.out, "a", encoding="utf-8") as out:
        while not os.path.exists(args.until_file) and time.monotonic() < end:
            line = dict(look(args.url, timeout=5), t=round(time.time(), 3))
            out.write(json.dumps(line) + "\n")
            out.flush()
            time.sleep(args.interval)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
