"""A bounded load generator that records every request's outcome.

Sends a mix of SGLang requests (``/generate`` and ``/v1/chat/completions``, streaming
and not) to one base URL with a fixed number of client threads, and writes one JSON
document: a summary and, for every request, its route, whether it streamed, the HTTP
status, whether the answer was complete (a non-streamed answer parsed with its finish
reason; a stream that ended with ``data: [DONE]`` after a finished chunk), truncated (a
200 stream cut before that), the error if any, the latency and the time it started.

Bounded: it sends at least ``--requests`` requests and keeps going while ``--until-file``
does not exist, up to ``--max-requests``; a stop is checked before each new request, and
requests in flight always finish. Standard library only (it runs on the controller).

    python tests/loadgen/loadgen.py --url http://127.0.0.1:39214 --requests 600 \\
        --concurrency 8 --out /tmp/load.json
"""

import argparse
import hashlib
import http.client
import itertools
import json
import os
import sys
import threading
import time
from urllib.parse import urlsplit

ROUTES = (("/generate", False), ("/generate", True),
          ("/v1/chat/completions", False), ("/v1/chat/completions", True))
STREAM_ROUTES = tuple(r for r in ROUTES if r[1])


def _block_orders(n):
    return list(itertools.permutations(range(n)))


def route_of(seq, routes=ROUTES):
    """The route of request ``seq``. Each block of len(routes) requests takes every route
    once (so the mix stays even), in an order drawn from a hash of the block's number.
    A plain cycle (seq % 4) phase-locks with a round_robin router: over 4 workers, each
    worker gets one route only (seen: the tune's control killed a server that had only
    plain requests, which the router retried, and lost nothing). With a drawn order, a
    worker that takes every k-th request sees every route, whatever k; deterministic."""
    n = len(routes)
    orders = _block_orders(n)
    block, pos = divmod(seq, n)
    draw = int.from_bytes(hashlib.sha256(b"%d" % block).digest()[:4], "big")
    return routes[orders[draw % len(orders)][pos]]


def request_body(route, stream, max_tokens, model, seq):
    prompt = "request %d: tell me about the fleet" % seq
    if route == "/generate":
        return {"text": prompt, "stream": stream,
                "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0}}
    return {"model": model, "stream": stream, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": prompt}]}


def _finished(route, obj):
    """Whether a parsed (chunk or full) answer carries a finish reason."""
    if route == "/generate":
        items = obj if isinstance(obj, list) else [obj]
        return bool(items) and all(
            isinstance(i, dict) and (i.get("meta_info") or {}).get("finish_reason")
            for i in items)
    return any(isinstance(c, dict) and c.get("finish_reason")
               for c in obj.get("choices") or [])


def read_stream(resp, route):
    """Read an SSE body; returns (complete, chunks, error)."""
    chunks, finished, done = 0, False, False
    try:
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                continue
            chunks += 1
            obj = json.loads(data)
            if isinstance(obj, dict) and obj.get("error"):
                return False, chunks, "error event: %s" % json.dumps(obj["error"])[:200]
            finished = finished or _finished(route, obj)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return False, chunks, "%s: %s" % (type(exc).__name__, exc)
    if not done:
        return False, chunks, "stream ended without data: [DONE]"
    if not finished:
        return False, chunks, "no chunk carried a finish reason"
    return True, chunks, None


def one_request(base, route, stream, body, timeout, headers):
    """Send one request; returns its record (without the sequence fields)."""
    parts = urlsplit(base)
    rec = {"route": route, "stream": stream, "status": None, "complete": False,
           "truncated": False, "chunks": 0, "error": None}
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers)
        conn.request("POST", route, body=json.dumps(body).encode(), headers=hdrs)
        resp = conn.getresponse()
        rec["status"] = resp.status
        if resp.status != 200:
            rec["error"] = "HTTP %d: %s" % (resp.status, resp.read()[:200].decode(
                "utf-8", "replace"))
        elif stream:
            rec["complete"], rec["chunks"], rec["error"] = read_stream(resp, route)
            rec["truncated"] = not rec["complete"]
        else:
            raw = resp.read()
            try:
                rec["complete"] = _finished(route, json.loads(raw))
            except ValueError as exc:
                rec["error"] = "bad JSON body: %s" % exc
            else:
                if not rec["complete"]:
                    rec["error"] = "answer without a finish reason"
            rec["truncated"] = not rec["complete"]
    except (OSError, http.client.HTTPException) as exc:
        rec["error"] = "%s: %s" % (type(exc).__name__, exc)
    finally:
        conn.close()
    rec["latency_s"] = round(time.monotonic() - t0, 4)
    return rec


def summarize(records, wall_s):
    ok = [r for r in records if r["status"] == 200 and r["complete"]]
    failed = [r for r in records if r["status"] != 200]
    truncated = [r for r in records if r["status"] == 200 and not r["complete"]]
    lat = sorted(r["latency_s"] for r in ok)

    def pct(p):
        return lat[min(int(p * len(lat)), len(lat) - 1)] if lat else None

    by_route = {}
    for r in records:
        key = "%s %s" % (r["route"], "stream" if r["stream"] else "plain")
        by_route[key] = by_route.get(key, 0) + 1
    return {"requests": len(records), "ok": len(ok), "failed": len(failed),
            "truncated": len(truncated), "lost": len(failed) + len(truncated),
            "by_route": by_route, "wall_s": round(wall_s, 3),
            "latency_s": {"p50": pct(0.5), "p99": pct(0.99), "max": lat[-1] if lat else None}}


def run(base, requests, concurrency, max_tokens=16, model="default", timeout=120,
        until_file=None, max_requests=None, api_key=None, streams_only=False,
        long_concurrency=0, long_tokens=160):
    """Run the load; returns {"summary": ..., "records": [...]}. ``long_concurrency`` more
    clients send requests of ``long_tokens`` tokens each (``"long": true`` in their records),
    so that a server has requests in flight whenever it is taken out of a router."""
    routes = STREAM_ROUTES if streams_only else ROUTES
    max_requests = max(max_requests or requests, requests)
    headers = {"Authorization": "Bearer " + api_key} if api_key else {}
    counter = itertools.count()
    records = []
    lock = threading.Lock()
    t_start = time.monotonic()

    def keep_going(seq):
        if seq >= max_requests:
            return False
        if seq < requests:
            return True
        return bool(until_file) and not os.path.exists(until_file)

    def worker(tokens=max_tokens):
        while True:
            seq = next(counter)
            if not keep_going(seq):
                return
            route, stream = route_of(seq, routes)
            started = time.monotonic() - t_start
            rec = one_request(base, route, stream,
                              request_body(route, stream, tokens, model, seq),
                              timeout, headers)
            rec.update({"seq": seq, "started_s": round(started, 4)})
            if tokens != max_tokens:
                rec["long"] = True
            with lock:
                records.append(rec)

    threads = [threading.Thread(target=worker, daemon=True) for _i in range(concurrency)]
    threads += [threading.Thread(target=worker, args=(long_tokens,), daemon=True)
                for _i in range(long_concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records.sort(key=lambda r: r["seq"])
    summary = summarize(records, time.monotonic() - t_start)
    summary.update({"concurrency": concurrency, "url": base,
                    "long": sum(1 for x in records if x.get("long"))})
    return {"summary": summary, "records": records}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:30000")
    ap.add_argument("--requests", type=int, default=600, help="requests to send at least")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--long-concurrency", type=int, default=0,
                    help="more clients, each sending requests of --long-tokens tokens")
    ap.add_argument("--long-tokens", type=int, default=160)
    ap.add_argument("--model", default="default")
    ap.add_argument("--timeout", type=float, default=120.0, help="per request, seconds")
    ap.add_argument("--until-file", help="keep sending while this file does not exist")
    ap.add_argument("--max-requests", type=int, help="hard cap with --until-file")
    ap.add_argument("--api-key-env", help="environment variable holding the API key")
    ap.add_argument("--streams-only", action="store_true",
                    help="streaming routes only: a router retries a plain request whose "
                         "worker dies, but cannot retry a stream that has begun")
    ap.add_argument("--out", required=True, help="JSON file to write")
    args = ap.parse_args(argv)
    if args.requests < 1 or args.concurrency < 1:
        ap.error("--requests and --concurrency must be at least 1")
    result = run(args.url.rstrip("/"), args.requests, args.concurrency, args.max_tokens,
                 args.model, args.timeout, args.until_file, args.max_requests,
                 os.environ.get(args.api_key_env) if args.api_key_env else None,
                 args.streams_only, args.long_concurrency, args.long_tokens)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    os.replace(tmp, args.out)
    print(json.dumps(result["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
