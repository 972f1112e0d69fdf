"""TEST DOUBLE of SGLang's serving benchmark client (``python -m sglang.bench_serving``;
``python -m sglang.benchmark.serving`` from 0.5.23 on). Not SGLang's code.

The CLI is the release's own: the parser is rebuilt from ``bench/bench_serving-<R>.json``,
which ``tests/emulator/bench_capture.py`` captured from the real wheel (every option, its
type, default, choices, help and group), so ``--help`` prints what the real tool prints and
unknown flags, bad values and missing flags of that release fail with argparse's own
message. The module path is the release's (``spec["module"]``; 0.5.23's
``sglang.bench_serving`` is the deprecated shim with its ``FutureWarning``).

What a run does, after the real flow (paths: 0.5.9 ``sglang/bench_serving.py``
``run_benchmark`` l.2780-2990 and ``benchmark`` l.2310-2700; 0.5.23
``sglang/benchmark/serving.py`` l.2000-2230 and l.1383-1970):

- the base URL is ``--base-url`` or ``http://{--host}:{--port}`` (port 30000 for the
  sglang backends); 0.5.23 first polls ``GET /v1/models`` once a second for
  ``--ready-check-timeout-sec`` (``wait_for_endpoint``, l.158) and exits 1 when it never
  answers 200;
- no ``--model``: the first id of ``GET /v1/models``; the tokenizer is ``--tokenizer``, else
  the model;
- auth as ``get_auth_headers``: env ``OPENAI_API_KEY`` as ``Bearer``, else (0.5.x) env
  ``API_KEY`` as given;
- datasets ``random`` and ``random-ids`` only: lengths drawn from
  ``[max(int(len * --random-range-ratio), 1), len]`` with ``--seed``, so ratio 1 is exactly
  ``--random-input-len`` / ``--random-output-len``;
- ``--warmup-requests`` requests first; if none succeeds it dies of the real
  ``ValueError("Warmup failed - ...")``;
- then every prompt, at ``--request-rate`` (inf: all at once; else Poisson), at most
  ``--max-concurrency`` in flight, streamed to ``/generate`` (``sglang``, ``sglang-native``),
  ``/v1/completions`` (``sglang-oai``) or ``/v1/chat/completions`` (``sglang-oai-chat``) with
  ``ignore_eos`` unless ``--disable-ignore-eos``;
- the result line has exactly the keys of the release's ``result = {...}``
  (``spec["result_keys"]``) and is appended to ``--output-file`` (default name as the real
  tool's for the random datasets).

Tokenizer: the real tool loads ``AutoTokenizer`` from ``--tokenizer``. The emulator's
server counts one whitespace-separated word as one token, so the double tokenizes the same
way and needs no tokenizer files: given a directory (a model directory that may hold only
``config.json`` and shards, as the Hub double's test model), it draws its random token ids
below that config's ``vocab_size`` and spells token ``i`` as the word ``t<i>``. A path
that is neither a directory nor a name fails as the real ``from_pretrained`` would not
find it (``OSError``, exit 1).

A request that does not answer 200, or whose stream ends without a finished last event,
is not ``completed`` (``success`` false); every figure counts completed requests only, as
the real ``calculate_metrics``. Standard library only.
"""

import argparse
import http.client
import json
import math
import os
import random
import sys
import threading
import time
from urllib.parse import urlsplit

from sglang._emulator import release as _release

DEFAULT_PORTS = {"sglang": 30000, "sglang-native": 30000, "sglang-oai": 30000,
                 "sglang-oai-chat": 30000, "lmdeploy": 23333, "vllm": 8000, "trt": 8000,
                 "gserver": 9988, "truss": 8080}
API_PATHS = {"sglang": "/generate", "sglang-native": "/generate",
             "sglang-oai": "/v1/completions", "sglang-oai-chat": "/v1/chat/completions"}
DATASETS = ("random", "random-ids")
DEFAULT_VOCAB = 32000


class Unsupported(Exception):
    """A run the double does not emulate (exit 1 with a message naming the double)."""


# --- the release's CLI --------------------------------------------------------------

def load_spec(release):
    with open(_release.bench_spec_path(release), encoding="utf-8") as fh:
        return json.load(fh)


def finite_positive_float(value):
    try:
        parsed = float(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError("expected a finite float > 0, got %r" % (value,)) from None
    if not math.isfinite(parsed) or parsed <= 0:
        raise argparse.ArgumentTypeError("expected a finite float > 0, got %r" % (value,))
    return parsed


def goodput_slo(pair):
    name, _sep, value = pair.partition(":")
    if name not in ("ttft", "tpot", "e2el"):
        raise argparse.ArgumentTypeError("expected KEY:VALUE with KEY in ttft, tpot, e2el, got %r" % (pair,))
    return name, finite_positive_float(value)


class ListAction(argparse.Action):
    """``LoRAPathAction``: the values as a list."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, list(values or []))


# argparse names a failing type by __name__ ("invalid int value"): keep the real names
finite_positive_float.__name__ = "_finite_positive_float"
goodput_slo.__name__ = "_goodput_slo"
TYPES = {"int": int, "float": float, "str": str, "_finite_positive_float": finite_positive_float,
         "_goodput_slo": goodput_slo}
ACTIONS = {"LoRAPathAction": ListAction, "BooleanOptionalAction": argparse.BooleanOptionalAction}


def build_parser(spec, prog=None):
    """An argparse parser with the release's options, groups and help strings."""
    parser = argparse.ArgumentParser(prog=prog, description=spec.get("description"))
    groups = {}
    for group in spec.get("groups", []):
        groups[group["title"]] = parser.add_argument_group(group["title"], group["description"])
    mutexes = []
    for mutex in spec.get("mutex_groups", []):
        owner = groups[mutex["group"]] if mutex.get("group") else parser
        mutexes.append(owner.add_mutually_exclusive_group(required=mutex.get("required", False)))
    for arg in spec["arguments"]:
        kwargs = dict(arg["kwargs"])
        if isinstance(kwargs.get("type"), dict):
            kwargs["type"] = TYPES.get(kwargs["type"]["name"], str)
        if isinstance(kwargs.get("action"), dict):
            kwargs["action"] = ACTIONS[kwargs["action"]["name"]]
        if arg.get("mutex") is not None:
            target = mutexes[arg["mutex"]]
        elif arg.get("group"):
            target = groups[arg["group"]]
        else:
            target = parser
        target.add_argument(*arg["names"], **kwargs)
    if spec.get("set_defaults"):
        parser.set_defaults(**spec["set_defaults"])
    return parser


# --- the tokenizer ------------------------------------------------------------------

class WordTokenizer:
    """One token is one word, as the emulator's server counts them."""

    def __init__(self, name):
        self.name = name
        self.vocab_size = DEFAULT_VOCAB
        if name and os.path.isdir(name):
            try:
                with open(os.path.join(name, "config.json"), encoding="utf-8") as fh:
                    config = json.load(fh)
            except (OSError, ValueError):
                config = {}
            text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
            vocab = text.get("vocab_size") or config.get("vocab_size")
            if isinstance(vocab, int) and vocab > 0:
                self.vocab_size = vocab
        elif name and (name.startswith(("/", "./", "../")) or name.count("/") > 1):
            raise OSError("Can't load tokenizer for '%s'. If you were trying to load it from "
                          "'https://huggingface.co/models', make sure you don't have a local "
                          "directory with the same name. Otherwise, make sure '%s' is the correct "
                          "path to a directory containing all relevant files for a "
                          "PreTrainedTokenizerFast tokenizer." % (name, name))

    def decode(self, ids):
        return " ".join("t%d" % i for i in ids)

    @staticmethod
    def count(text):
        return len(str(text or "").split())


# --- HTTP ---------------------------------------------------------------------------

def auth_headers(release):
    key = os.environ.get("OPENAI_API_KEY")
    if key:
        return {"Authorization": "Bearer %s" % key}
    if _release.version_tuple(release) >= (0, 5) and os.environ.get("API_KEY"):
        return {"Authorization": os.environ["API_KEY"]}
    return {}


def _connection(url, timeout):
    parts = urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), timeout=timeout), parts


def http_get_json(url, headers, timeout=5):
    conn, parts = _connection(url, timeout)
    try:
        conn.request("GET", parts.path or "/", headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            return resp.status, None
        return resp.status, json.loads(body)
    finally:
        conn.close()


def wait_for_endpoint(url, timeout_sec, headers):
    print("Waiting up to %ss for %s to become ready..." % (timeout_sec, url))
    start = time.perf_counter()
    while True:
        try:
            if http_get_json(url, headers)[0] == 200:
                print("Server ready in %.1fs." % (time.perf_counter() - start))
                return True
        except (OSError, http.client.HTTPException, ValueError):
            pass
        if time.perf_counter() - start >= timeout_sec:
            print("Server did not become ready within %ss timeout." % timeout_sec)
            return False
        time.sleep(1)


class Output:
    __slots__ = ("success", "ttft", "latency", "itl", "output_len", "text", "error", "start")

    def __init__(self):
        self.success, self.ttft, self.latency, self.itl = False, 0.0, 0.0, []
        self.output_len, self.text, self.error, self.start = 0, "", "", 0.0


def one_request(api_url, backend, model, prompt, output_len, args, headers):
    """One streamed request, timed as ``async_request_*`` times it."""
    out = Output()
    stream = not getattr(args, "disable_stream", False)
    ignore_eos = not getattr(args, "disable_ignore_eos", False)
    extra = json.loads(args.extra_request_body) if getattr(args, "extra_request_body", None) else {}
    if backend in ("sglang", "sglang-native"):
        body = {"text": prompt, "stream": stream,
                "sampling_params": {"temperature": 0.0, "max_new_tokens": output_len,
                                    "ignore_eos": ignore_eos}}
    elif backend == "sglang-oai":
        body = {"model": model, "prompt": prompt, "temperature": 0.0, "max_tokens": output_len,
                "stream": stream, "ignore_eos": ignore_eos, "stream_options": {"include_usage": True}}
    else:
        body = {"model": model, "messages": [{"role": "user", "content": prompt}],
                "temperature": 0.0, "max_tokens": output_len, "stream": stream,
                "ignore_eos": ignore_eos, "stream_options": {"include_usage": True}}
    body.update(extra)
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers)
    conn, parts = _connection(api_url, 6 * 3600)
    out.start = start = time.perf_counter()
    last = None
    finished = False
    try:
        conn.request("POST", parts.path, body=json.dumps(body), headers=hdrs)
        resp = conn.getresponse()
        if resp.status != 200:
            out.error = "%s %s" % (resp.status, resp.read()[:200].decode("utf-8", "replace"))
            return out
        if not stream:
            data = json.loads(resp.read())
            out.ttft = out.latency = time.perf_counter() - start
            meta = data.get("meta_info") or {}
            out.text = data.get("text") or ""
            out.output_len = int(meta.get("completion_tokens") or WordTokenizer.count(out.text))
            out.success = True
            return out
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                continue
            event = json.loads(payload)
            now = time.perf_counter()
            if backend in ("sglang", "sglang-native"):
                meta = event.get("meta_info") or {}
                out.text = event.get("text") or out.text
                out.output_len = int(meta.get("completion_tokens") or out.output_len)
                done = bool(meta.get("finish_reason"))
                got_token = True
            else:
                choices = event.get("choices") or []
                piece = ""
                done = False
                for choice in choices:
                    piece += choice.get("text") or (choice.get("delta") or {}).get("content") or ""
                    done = done or bool(choice.get("finish_reason"))
                usage = event.get("usage") or {}
                if usage.get("completion_tokens"):
                    out.output_len = int(usage["completion_tokens"])
                out.text += piece
                got_token = bool(piece)
            if got_token:
                if last is None:
                    out.ttft = now - start
                else:
                    out.itl.append(now - last)
                last = now
            finished = finished or done
        out.latency = time.perf_counter() - start
        if not out.output_len:
            out.output_len = WordTokenizer.count(out.text)
        out.success = finished
        if not finished:
            out.error = "the stream ended without a finished event"
    except (OSError, http.client.HTTPException, ValueError) as exc:
        out.error = "%s: %s" % (type(exc).__name__, exc)
    finally:
        conn.close()
    return out


# --- the run ------------------------------------------------------------------------

def _lengths(rng, length, ratio, count):
    low = max(int(length * ratio), 1)
    return [rng.randint(low, length) if length > low else length for _n in range(count)]


def sample_random_requests(args, tokenizer):
    rng = random.Random(args.seed)
    ratio = float(args.random_range_ratio)
    inputs = _lengths(rng, int(args.random_input_len), ratio, args.num_prompts)
    outputs = _lengths(rng, int(args.random_output_len), ratio, args.num_prompts)
    requests = []
    for in_len, out_len in zip(inputs, outputs):
        ids = [rng.randrange(tokenizer.vocab_size) for _n in range(in_len)]
        requests.append((tokenizer.decode(ids), in_len, out_len))
    return requests


def _percentile(values, q):
    vals = sorted(values)
    if not vals:
        return 0.0
    pos = (len(vals) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def _stats(values):
    mean = sum(values) / len(values) if values else 0.0
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) if values else 0.0
    return {"mean": mean, "median": _percentile(values, 50), "std": std,
            "p90": _percentile(values, 90), "p95": _percentile(values, 95),
            "p99": _percentile(values, 99)}


def metrics(requests, outputs, duration):
    """``calculate_metrics``: completed requests only; TPOT over requests of 2+ tokens."""
    ok = [(req, out) for req, out in zip(requests, outputs) if out.success]
    total_input = sum(req[1] for req, _out in ok)
    total_output = sum(out.output_len for _req, out in ok)
    ttfts = [out.ttft * 1000 for _req, out in ok]
    tpots = [(out.latency - out.ttft) / (out.output_len - 1) * 1000 for _req, out in ok if out.output_len > 1]
    itls = [x * 1000 for _req, out in ok for x in out.itl]
    e2e = [out.latency * 1000 for _req, out in ok]
    # peaks per second, as the real tool buckets token arrival times
    per_second, spans = {}, []
    for _req, out in ok:
        stamp = out.start + out.ttft
        per_second[int(stamp)] = per_second.get(int(stamp), 0) + 1
        for gap in out.itl:
            stamp += gap
            per_second[int(stamp)] = per_second.get(int(stamp), 0) + 1
        spans.append((out.start, out.start + out.latency))
    peak_running = 0
    for begin, _end in spans:
        peak_running = max(peak_running, sum(1 for b, e in spans if b <= begin < e))
    return {"completed": len(ok), "total_input": total_input, "total_output": total_output,
            "total_output_retokenized": sum(WordTokenizer.count(out.text) for _req, out in ok),
            "duration": duration, "ttft": _stats(ttfts), "tpot": _stats(tpots), "itl": _stats(itls),
            "e2e_latency": _stats(e2e), "max_itl": max(itls) if itls else 0.0,
            "concurrency": sum(e2e) / 1000.0 / duration if duration else 0.0,
            "max_output_tokens_per_s": max(per_second.values()) if per_second else 0,
            "max_concurrent_requests": peak_running}


def result_line(spec, args, m, server_info):
    duration = m["duration"] or 1e-9
    values = {
        "tag": getattr(args, "tag", None), "backend": args.backend, "dataset_name": args.dataset_name,
        "request_rate": args.request_rate, "max_concurrency": args.max_concurrency,
        "sharegpt_output_len": getattr(args, "sharegpt_output_len", None),
        "random_input_len": args.random_input_len, "random_output_len": args.random_output_len,
        "random_range_ratio": args.random_range_ratio, "server_info": server_info,
        "duration": m["duration"], "completed": m["completed"],
        "total_input_tokens": m["total_input"], "total_input_text_tokens": m["total_input"],
        "total_input_vision_tokens": 0, "total_output_tokens": m["total_output"],
        "total_output_tokens_retokenized": m["total_output_retokenized"],
        "request_throughput": m["completed"] / duration, "input_throughput": m["total_input"] / duration,
        "output_throughput": m["total_output"] / duration,
        "total_throughput": (m["total_input"] + m["total_output"]) / duration,
        "concurrency": m["concurrency"], "accept_length": None,
        "max_output_tokens_per_s": m["max_output_tokens_per_s"],
        "max_concurrent_requests": m["max_concurrent_requests"],
    }
    line = {}
    for key in spec["result_keys"]:
        if key in values:
            line[key] = values[key]
            continue
        stat, _sep, rest = key.partition("_")
        metric = rest[:-len("_ms")] if rest.endswith("_ms") else None
        if metric in m and stat in m[metric]:
            line[key] = m[metric][stat]
        else:
            line[key] = None
    return line


def default_output_file(args):
    return "%s_%s_%d_%d_%d.jsonl" % (args.backend, time.strftime("%m%d"), args.num_prompts,
                                     args.random_input_len, args.random_output_len)


def run(spec, release, args):
    if args.backend not in API_PATHS:
        raise Unsupported("--backend %s" % args.backend)
    if args.dataset_name not in DATASETS:
        raise Unsupported("--dataset-name %s" % args.dataset_name)
    if args.port is None:
        args.port = DEFAULT_PORTS.get(args.backend, 30000)
    base_url = ("http://%s:%s" % (args.host, args.port)) if args.base_url is None else args.base_url.rstrip("/")
    model_url = base_url + "/v1/models"
    api_url = base_url + API_PATHS[args.backend]
    headers = auth_headers(release)
    timeout = getattr(args, "ready_check_timeout_sec", 0) or 0
    if timeout > 0 and not wait_for_endpoint(model_url, timeout, headers):
        print("Server at %s is not ready. Exiting." % model_url)
        return 1
    if args.model is None:
        try:
            _status, data = http_get_json(model_url, headers)
            models = (data or {}).get("data") or []
            args.model = models[0]["id"] if models else None
        except (OSError, http.client.HTTPException, ValueError) as exc:
            print("Failed to fetch model from %s. Error: %s" % (model_url, exc))
            print("Please specify the correct host and port using `--host` and `--port`.")
            return 1
    if args.model is None:
        print("No model specified or found. Please provide a model using `--model`.")
        return 1
    print("%s\n" % args)
    tokenizer = WordTokenizer(args.tokenizer if args.tokenizer is not None else args.model)
    model_id = getattr(args, "served_model_name", None) or args.model
    requests = sample_random_requests(args, tokenizer)
    print("#Input tokens: %d" % sum(r[1] for r in requests))
    print("#Output tokens: %d" % sum(r[2] for r in requests))

    warmup = getattr(args, "warmup_requests", 1)
    print("Starting warmup with %d sequences..." % warmup)
    first = requests[0] if requests else ("t0", 1, 1)
    warm = [one_request(api_url, args.backend, model_id, first[0], min(first[2], 32), args, headers)
            for _n in range(max(warmup, 0))]
    if warmup > 0 and not any(out.success for out in warm):
        raise ValueError("Warmup failed - Please make sure benchmark arguments are correctly "
                         "specified. Error: %s" % warm[0].error)
    print("Warmup completed with %d sequences. Starting main benchmark run..." % warmup)
    if getattr(args, "flush_cache", False):
        conn, parts = _connection(base_url + "/flush_cache", 60)
        try:
            conn.request("POST", parts.path, headers=headers)
            conn.getresponse().read()
        finally:
            conn.close()

    outputs = [None] * len(requests)
    slots = threading.Semaphore(args.max_concurrency or max(len(requests), 1))
    rng = random.Random(args.seed)
    threads = []

    def worker(index, req):
        try:
            outputs[index] = one_request(api_url, args.backend, model_id, req[0], req[2], args, headers)
        finally:
            slots.release()

    start = time.perf_counter()
    for index, req in enumerate(requests):
        if index and math.isfinite(args.request_rate):
            time.sleep(rng.expovariate(args.request_rate))
        slots.acquire()
        thread = threading.Thread(target=worker, args=(index, req), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    duration = time.perf_counter() - start

    info_path = "/server_info" if _release.version_tuple(release) >= (0, 5, 23) else "/get_server_info"
    try:
        status, server_info = http_get_json(base_url + info_path, headers)
        if status != 200:
            server_info = None
    except (OSError, http.client.HTTPException, ValueError):
        server_info = None
    if "server_info" not in spec["result_keys"]:
        server_info = None
    m = metrics(requests, outputs, duration)
    line = result_line(spec, args, m, server_info)
    _print_summary(args, line, m)
    path = args.output_file or default_output_file(args)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
    return 0


def _print_summary(args, line, m):
    print("\n{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    rows = (("Backend:", args.backend), ("Traffic request rate:", args.request_rate),
            ("Max request concurrency:", args.max_concurrency if args.max_concurrency else "not set"),
            ("Successful requests:", m["completed"]), ("Benchmark duration (s):", "%.2f" % m["duration"]),
            ("Total input tokens:", m["total_input"]), ("Total generated tokens:", m["total_output"]),
            ("Request throughput (req/s):", "%.2f" % line["request_throughput"]),
            ("Output token throughput (tok/s):", "%.2f" % line["output_throughput"]),
            ("Mean TTFT (ms):", "%.2f" % m["ttft"]["mean"]), ("Mean TPOT (ms):", "%.2f" % m["tpot"]["mean"]),
            ("Mean ITL (ms):", "%.2f" % m["itl"]["mean"]), ("Max ITL (ms):", "%.2f" % m["max_itl"]))
    for label, value in rows:
        print("{:<40} {:<10}".format(label, value))
    print("=" * 50)


def main(module, argv=None):
    """``python -m <module>``: the release's CLI, then :func:`run`."""
    release = _release.current_release()
    spec = load_spec(release)
    if module not in (spec["module"], spec.get("shim")):
        # the release has no such module (only an emulator run from the source tree gets here)
        sys.stderr.write("%s: No module named '%s'\n" % (sys.executable, module))
        return 1
    args = build_parser(spec).parse_args(sys.argv[1:] if argv is None else argv)
    print("benchmark_args=%s" % args)
    try:
        return run(spec, release, args)
    except Unsupported as exc:
        sys.stderr.write("sglang emulator (TEST DOUBLE): %s is not emulated by the bench_serving "
                         "double (it runs the random datasets against the sglang backends)\n" % exc)
        return 1
