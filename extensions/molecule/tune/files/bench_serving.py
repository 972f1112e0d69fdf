"""A TEST DOUBLE of SGLang's ``python -m sglang.bench_serving`` client (not SGLang's code).

The emulator wheel carries the server only; the tune scenario puts this file into each
host's venv as ``sglang/bench_serving.py`` so that the benchmark role measures every trial
on its own host, as it does on a real fleet (no controller-side client in between).

It takes the flags the benchmark role passes (``--backend sglang --dataset-name random
--random-range-ratio 1``: every prompt has exactly ``--random-input-len`` tokens, one token
being one word for the emulator, and asks for exactly ``--random-output-len`` tokens),
streams ``/generate`` with at most ``--max-concurrency`` requests in flight, and appends
one JSON line with the real tool's key names to ``--output-file``. A request that does not
answer 200, or whose stream ends without a finished last event, is not ``completed`` and
counts in ``failed`` (the real tool counts only completed requests). Standard library only.
"""

import argparse
import http.client
import json
import math
import sys
import threading
import time
from urllib.parse import urlsplit


def _parser():
    p = argparse.ArgumentParser(prog="python -m sglang.bench_serving",
                                description="Benchmark the online serving throughput (test double).")
    p.add_argument("--backend", default="sglang", choices=["sglang"])
    p.add_argument("--base-url", required=True)
    p.add_argument("--dataset-name", default="random", choices=["random"])
    p.add_argument("--tokenizer")
    p.add_argument("--model")
    p.add_argument("--random-input-len", type=int, default=1024)
    p.add_argument("--random-output-len", type=int, default=1024)
    p.add_argument("--random-range-ratio", type=float, default=1.0)
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--output-file")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--warmup-requests", type=int, default=1)
    p.add_argument("--ready-check-timeout-sec", type=int, default=120)
    p.add_argument("--disable-tqdm", action="store_true")
    return p


def _percentile(values, q):
    if not values:
        return 0.0
    vals = sorted(values)
    k = (len(vals) - 1) * q / 100.0
    lo, hi = int(math.floor(k)), int(math.ceil(k))
    return vals[lo] + (vals[hi] - vals[lo]) * (k - lo)


def _mean(values):
    return sum(values) / len(values) if values else 0.0


def one_request(base, seq, args):
    """(ok, output tokens, ttft_s, latency_s, itls_s) of one streamed /generate."""
    url = urlsplit(base)
    words = ["w%d" % ((seq * 31 + i + args.seed) % 997) for i in range(args.random_input_len)]
    body = json.dumps({"text": " ".join(words), "stream": True,
                       "sampling_params": {"max_new_tokens": args.random_output_len,
                                           "ignore_eos": True, "temperature": 0}})
    start = time.perf_counter()
    conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=600)
    ttft, last, itls, tokens, finished = None, None, [], 0, False
    try:
        conn.request("POST", "/generate", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            resp.read()
            return False, 0, 0.0, time.perf_counter() - start, []
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                continue
            now = time.perf_counter()
            event = json.loads(line[5:].strip())
            meta = event.get("meta_info") or {}
            if ttft is None:
                ttft = now - start
            else:
                itls.append(now - last)
            last = now
            tokens = int(meta.get("completion_tokens") or tokens)
            finished = finished or bool(meta.get("finish_reason"))
    except (OSError, http.client.HTTPException, ValueError):
        return False, tokens, ttft or 0.0, time.perf_counter() - start, itls
    finally:
        conn.close()
    return finished, tokens, ttft or 0.0, time.perf_counter() - start, itls


def run(args):
    base = args.base_url.rstrip("/")
    for i in range(max(args.warmup_requests, 0)):
        one_request(base, -1 - i, args)
    slots = threading.Semaphore(args.max_concurrency or args.num_prompts)
    results, lock, threads = [], threading.Lock(), []

    def worker(seq):
        try:
            res = one_request(base, seq, args)
            with lock:
                results.append(res)
        finally:
            slots.release()

    start = time.perf_counter()
    for seq in range(args.num_prompts):
        slots.acquire()
        t = threading.Thread(target=worker, args=(seq,), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    duration = time.perf_counter() - start
    ok = [r for r in results if r[0]]
    ttfts = [r[2] * 1000 for r in ok]
    tpots = [(r[3] - r[2]) / (r[1] - 1) * 1000 for r in ok if r[1] > 1]
    itls = [x * 1000 for r in ok for x in r[4]]
    e2e = [r[3] * 1000 for r in ok]
    out_tokens = sum(r[1] for r in ok)
    return {
        "backend": args.backend, "dataset_name": args.dataset_name,
        "max_concurrency": args.max_concurrency, "random_input_len": args.random_input_len,
        "random_output_len": args.random_output_len, "num_prompts": args.num_prompts,
        "duration": duration, "completed": len(ok), "failed": len(results) - len(ok),
        "total_input_tokens": len(ok) * args.random_input_len, "total_output_tokens": out_tokens,
        "request_throughput": len(ok) / duration, "input_throughput": len(ok) * args.random_input_len / duration,
        "output_throughput": out_tokens / duration,
        "mean_ttft_ms": _mean(ttfts), "median_ttft_ms": _percentile(ttfts, 50), "p99_ttft_ms": _percentile(ttfts, 99),
        "mean_tpot_ms": _mean(tpots), "median_tpot_ms": _percentile(tpots, 50), "p99_tpot_ms": _percentile(tpots, 99),
        "mean_itl_ms": _mean(itls), "median_itl_ms": _percentile(itls, 50), "p95_itl_ms": _percentile(itls, 95),
        "p99_itl_ms": _percentile(itls, 99), "max_itl_ms": max(itls) if itls else 0.0,
        "mean_e2e_latency_ms": _mean(e2e), "median_e2e_latency_ms": _percentile(e2e, 50),
    }


def main(argv=None):
    args = _parser().parse_args(argv)
    result = run(args)
    if args.output_file:
        with open(args.output_file, "a", encoding="utf-8") as out:
            out.write(json.dumps(result) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
