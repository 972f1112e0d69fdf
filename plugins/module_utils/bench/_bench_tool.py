# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The benchmark tools' I/O: argv builders and output parsers for sglang.bench_serving and
aiperf, in one result schema (the pick and the report are ``_bench_report``).

One result schema for every tool (:data:`RESULT_FIELDS`)::

    {tool, strategy, concurrency, num_prompts, input_len, output_len,
     output_tok_s,          # aggregate output tokens per second
     request_tok_s,         # decode tokens per second of one request (optional: None)
     request_throughput,    # completed requests per second
     mean_ttft_ms, median_ttft_ms, p99_ttft_ms, mean_itl_ms, mean_tpot_ms,
     median_tpot_ms, p99_tpot_ms, median_itl_ms, p99_itl_ms,   # None where a release lacks them
     duration_s, completed,
     failed}                # requests sent - requests completed (None when unknown)

Sources:

* ``sglang.bench_serving`` (``sglang.benchmark.serving`` from 0.5.23 on) appends one JSON
  object per run to its ``--output-file``; the last line is the newest run. Python's
  ``json.dumps`` writes ``inf`` as bare ``Infinity`` (``request_rate``), which strict JSON
  parsers reject. Key sets differ per release (0.4.6.post5 has no ``total_throughput``, no
  ``tag``, only p99 percentiles); only keys present in every release are required.
* NVIDIA aiperf's ``profile_export_aiperf.json``: one object per metric tag
  (``{"unit": .., "avg": .., "p50": .., "p99": ..}``) at the top level (schema 1.x,
  aiperf 0.13) or under ``records`` (older exports), plus ``input_config``.

Non-finite numbers (``Infinity``, ``NaN``) become ``None`` in results so that the JSON
written from them is strict. Pure Python, no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name

import json
import math

from ansible_collections.gpufleet.sglang.plugins.module_utils.common._version import at_least

RESULT_FIELDS = (
    "tool", "strategy", "concurrency", "num_prompts", "input_len", "output_len",
    "output_tok_s", "request_tok_s", "request_throughput", "mean_ttft_ms",
    "median_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "mean_tpot_ms", "median_tpot_ms",
    "p99_tpot_ms", "median_itl_ms", "p99_itl_ms", "duration_s", "completed", "failed",
)

# bench_serving JSONL keys present in every release checked (0.4.6.post5 .. 0.5.23).
BENCH_SERVING_REQUIRED = (
    "output_throughput", "request_throughput", "mean_ttft_ms", "median_ttft_ms",
    "p99_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "completed", "duration",
)

# Flags the argv builder may leave out when the installed bench_serving lacks them.
BENCH_SERVING_OPTIONAL_FLAGS = ("--warmup-requests", "--disable-tqdm", "--ready-check-timeout-sec")

OBJECTIVES = ("throughput", "latency")
TOOLS = ("bench_serving", "aiperf")


class BenchError(ValueError):
    """A result cannot be read, or a run cannot be built."""


# ---------------------------------------------------------------------------- numbers

def num(value):
    """float, or None for missing / non-numeric / non-finite values."""
    if value is None or isinstance(value, bool):
        return None
    try:
        val = float(value)
    except (TypeError, ValueError):
        return None
    if math.isnan(val) or math.isinf(val):
        return None
    return val


def _int(value):
    val = num(value)
    return None if val is None else int(round(val))


def finite(obj):
    """Copy of a JSON-like object with every non-finite float replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return dict((k, finite(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def loads(text):
    """json.loads that accepts bare Infinity / -Infinity / NaN (as Python writes them)."""
    return json.loads(text, parse_constant=lambda name: {
        "Infinity": float("inf"), "-Infinity": float("-inf"), "NaN": float("nan")}[name])


def empty_result(tool, strategy=None, concurrency=None):
    res = dict((key, None) for key in RESULT_FIELDS)
    res.update(tool=tool, strategy=strategy, concurrency=concurrency)
    return res


# ---------------------------------------------------------------------- bench_serving

def bench_serving_module(release):
    """Python module of the serving benchmark: it moved to sglang.benchmark.serving in 0.5.23
    (sglang.bench_serving is a deprecated shim there)."""
    try:
        newer = at_least(release, "0.5.23")
    except ValueError:
        raise BenchError("cannot read an SGLang version from %r" % (release,))
    return "sglang.benchmark.serving" if newer else "sglang.bench_serving"


def last_json_line(text):
    """The newest run of an append-mode JSONL file (its last non-blank line), parsed."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines:
        raise BenchError("the bench_serving output file is empty (did the run fail?)")
    try:
        obj = loads(lines[-1])
    except ValueError as exc:
        raise BenchError("line %d of the bench_serving output is not JSON: %s" % (len(lines), exc))
    if not isinstance(obj, dict):
        raise BenchError("line %d of the bench_serving output is not a JSON object" % len(lines))
    return obj


def parse_bench_serving(text, strategy=None, concurrency=None, num_prompts=None):
    """Normalize the last line of a bench_serving JSONL output (text or parsed dict)."""
    obj = text if isinstance(text, dict) else last_json_line(text)
    missing = [key for key in BENCH_SERVING_REQUIRED if key not in obj]
    if missing:
        raise BenchError("the bench_serving result lacks %s (keys: %s)"
                         % (", ".join(missing), ", ".join(sorted(obj)[:60])))
    res = empty_result("bench_serving", strategy)
    conc = concurrency if concurrency is not None else obj.get("max_concurrency")
    tpot = num(obj.get("mean_tpot_ms"))
    res.update(
        concurrency=_int(conc),
        num_prompts=_int(num_prompts) if num_prompts is not None else _int(obj.get("completed")),
        input_len=_int(obj.get("random_input_len")),
        output_len=_int(obj.get("random_output_len")),
        output_tok_s=num(obj.get("output_throughput")),
        # decode rate of one request: TPOT excludes the time to the first token
        request_tok_s=(1000.0 / tpot) if tpot else None,
        request_throughput=num(obj.get("request_throughput")),
        mean_ttft_ms=num(obj.get("mean_ttft_ms")),
        median_ttft_ms=num(obj.get("median_ttft_ms")),
        p99_ttft_ms=num(obj.get("p99_ttft_ms")),
        mean_itl_ms=num(obj.get("mean_itl_ms")),
        mean_tpot_ms=tpot,
        median_tpot_ms=num(obj.get("median_tpot_ms")),
        p99_tpot_ms=num(obj.get("p99_tpot_ms")),
        median_itl_ms=num(obj.get("median_itl_ms")),
        p99_itl_ms=num(obj.get("p99_itl_ms")),
        duration_s=num(obj.get("duration")),
        completed=_int(obj.get("completed")),
    )
    res["failed"] = _failed(res["num_prompts"] if num_prompts is not None else None, res["completed"])
    return res


def _failed(sent, completed):
    """Requests sent minus requests completed; None when the number sent is not known.
    bench_serving counts only successful requests in ``completed`` (a failed request is
    dropped from every latency figure), so a refusing server would look fast without it."""
    if sent is None or completed is None:
        return None
    return max(int(sent) - int(completed), 0)


def _flag_set(available_flags):
    if available_flags is None:
        return None
    if isinstance(available_flags, dict):
        names = set()
        for key, spec in available_flags.items():
            names.add(key)
            if isinstance(spec, dict):
                names.update(spec.get("names") or [])
        return names
    return set(available_flags)


def _extra_argv(extra_args):
    argv = []
    for flag, value in sorted((extra_args or {}).items()):
        flag = flag if flag.startswith("-") else "--" + flag
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            argv.append(flag)
            argv.extend(str(v) for v in value)
        elif isinstance(value, dict):
            argv.extend([flag, json.dumps(value, sort_keys=True)])
        else:
            argv.extend([flag, str(value)])
    return argv


def _positive(name, value, minimum=1):
    try:
        val = int(value)
    except (TypeError, ValueError):
        raise BenchError("%s must be an integer, got %r" % (name, value))
    if val < minimum:
        raise BenchError("%s must be at least %d, got %d" % (name, minimum, val))
    return val


def bench_serving_argv(python, release, base_url, tokenizer, concurrency, num_prompts,
                       input_len, output_len, output_file, seed=42, warmup_requests=1,
                       backend="sglang", model=None, ready_timeout=None, extra_args=None,
                       available_flags=None):
    """argv of one bench_serving run: random prompts of exactly input_len tokens asking for
    exactly output_len tokens (--random-range-ratio 1), at most ``concurrency`` in flight.

    ``available_flags`` (the flags of the installed release's ``--help``, e.g. from
    ``_sglang_help.parse_help``) is checked: optional flags the release lacks are left
    out, any other missing flag raises :class:`BenchError`.
    """
    argv = [python, "-m", bench_serving_module(release),
            "--backend", backend,
            "--base-url", str(base_url).rstrip("/"),
            "--dataset-name", "random",
            "--tokenizer", tokenizer,
            "--random-input-len", str(_positive("input_len", input_len)),
            "--random-output-len", str(_positive("output_len", output_len)),
            "--random-range-ratio", "1",
            "--num-prompts", str(_positive("num_prompts", num_prompts)),
            "--max-concurrency", str(_positive("concurrency", concurrency)),
            "--output-file", output_file,
            "--seed", str(int(seed))]
    if model:
        argv += ["--model", model]
    argv += ["--warmup-requests", str(_positive("warmup_requests", warmup_requests, 0))]
    if ready_timeout is not None:
        argv += ["--ready-check-timeout-sec", str(int(ready_timeout))]
    argv += ["--disable-tqdm"]
    argv += _extra_argv(extra_args)
    known = _flag_set(available_flags)
    if known is None:
        return argv
    out, i = argv[:3], 3
    while i < len(argv):
        flag = argv[i]
        j = i + 1
        while j < len(argv) and not argv[j].startswith("--"):
            j += 1
        if flag not in known:
            if flag in BENCH_SERVING_OPTIONAL_FLAGS:
                i = j
                continue
            raise BenchError("the bench_serving of SGLang %s has no %s (needed for %s)"
                             % (release, flag, " ".join(argv[i:j])))
        out.extend(argv[i:j])
        i = j
    return out


# ------------------------------------------------------------------------------ aiperf

def aiperf_argv(aiperf, url, model, tokenizer, concurrency, request_count, input_len,
                output_len, artifact_dir, seed=42, warmup_requests=1,
                endpoint_type="completions", streaming=True, ignore_eos=True,
                workers_max=None, api_key=None, extra_args=None):
    """argv of one ``aiperf profile`` run equivalent to :func:`bench_serving_argv`:
    synthetic prompts of exactly input_len tokens, output_len output tokens, a fixed
    concurrency, token counts as the server reports them."""
    argv = [aiperf, "profile",
            "--model", model,
            "--url", str(url).rstrip("/"),
            "--endpoint-type", endpoint_type,
            "--tokenizer", tokenizer,
            "--isl", str(_positive("input_len", input_len)), "--isl-stddev", "0",
            "--osl", str(_positive("output_len", output_len)), "--osl-stddev", "0",
            "--concurrency", str(_positive("concurrency", concurrency)),
            "--request-count", str(_positive("request_count", request_count)),
            "--random-seed", str(int(seed)),
            "--artifact-dir", artifact_dir,
            "--ui-type", "none",
            "--use-server-token-count",
            "--no-server-metrics",
            "--no-gpu-telemetry"]
    if streaming:
        argv.append("--streaming")
    if endpoint_type == "completions":
        # SGLang's /v1/completions reads max_tokens, not max_completion_tokens
        argv.append("--use-legacy-max-tokens")
    if ignore_eos:
        argv += ["--extra-inputs", "ignore_eos:true"]
    if _positive("warmup_requests", warmup_requests, 0):
        argv += ["--warmup-request-count", str(int(warmup_requests))]
    if workers_max:
        argv += ["--workers-max", str(_positive("workers_max", workers_max))]
    if api_key:
        argv += ["--api-key", api_key]
    argv += _extra_argv(extra_args)
    return argv


def _metric(metrics, tag, stat="avg"):
    entry = metrics.get(tag)
    if isinstance(entry, dict):
        return num(entry.get(stat))
    return None


def _profiling_phase(config):
    for phase in config.get("phases") or []:
        if isinstance(phase, dict) and phase.get("kind", phase.get("name")) == "profiling":
            return phase
    return {}


def parse_aiperf(text, strategy=None, concurrency=None, num_prompts=None):
    """Normalize aiperf's ``profile_export_aiperf.json`` (text or parsed dict)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if isinstance(text, dict):
        obj = text
    else:
        try:
            obj = loads(text or "")
        except ValueError as exc:
            raise BenchError("the aiperf export is not JSON: %s" % exc)
    if not isinstance(obj, dict):
        raise BenchError("the aiperf export is not a JSON object")
    metrics = obj.get("records") if isinstance(obj.get("records"), dict) else obj
    if _metric(metrics, "output_token_throughput") is None and \
            _metric(metrics, "request_throughput") is None:
        errors = obj.get("error_summary") or []
        raise BenchError("the aiperf export has no throughput metrics%s" % (
            (" (errors: %s)" % json.dumps(errors)[:500]) if errors else ""))
    config = obj.get("input_config") if isinstance(obj.get("input_config"), dict) else {}
    phase = _profiling_phase(config)
    loadgen = config.get("loadgen") if isinstance(config.get("loadgen"), dict) else {}
    datasets = config.get("datasets") or []
    prompts = datasets[0].get("prompts", {}) if datasets and isinstance(datasets[0], dict) else {}
    old_prompt = ((config.get("input") or {}).get("prompt") or {}) if isinstance(config.get("input"), dict) else {}

    def _mean(new, old):
        val = (prompts.get(new) or {}).get("mean") if isinstance(prompts.get(new), dict) else None
        if val is None:
            val = (old_prompt.get(old) or {}).get("mean") if isinstance(old_prompt.get(old), dict) else None
        return _int(val)

    conc = concurrency if concurrency is not None else phase.get("concurrency", loadgen.get("concurrency"))
    requests = num_prompts if num_prompts is not None else phase.get(
        "requests", loadgen.get("request_count", _metric(metrics, "request_count")))
    completed = _metric(metrics, "completed_request_count")
    if completed is None:
        total = _metric(metrics, "request_count")
        errors = _metric(metrics, "error_request_count") or 0
        completed = None if total is None else total - errors
    res = empty_result("aiperf", strategy)
    itl = _metric(metrics, "inter_chunk_latency")
    res.update(
        concurrency=_int(conc),
        num_prompts=_int(requests),
        input_len=_mean("isl", "input_tokens"),
        output_len=_mean("osl", "output_tokens"),
        output_tok_s=_metric(metrics, "output_token_throughput"),
        request_tok_s=_metric(metrics, "output_token_throughput_per_user"),
        request_throughput=_metric(metrics, "request_throughput"),
        mean_ttft_ms=_metric(metrics, "time_to_first_token"),
        median_ttft_ms=_metric(metrics, "time_to_first_token", "p50"),
        p99_ttft_ms=_metric(metrics, "time_to_first_token", "p99"),
        # bench_serving's ITL is the gap between streamed chunks; its TPOT is
        # (latency - ttft) / (tokens - 1), which aiperf calls inter_token_latency
        mean_itl_ms=itl if itl is not None else _metric(metrics, "inter_token_latency"),
        mean_tpot_ms=_metric(metrics, "inter_token_latency"),
        median_tpot_ms=_metric(metrics, "inter_token_latency", "p50"),
        p99_tpot_ms=_metric(metrics, "inter_token_latency", "p99"),
        median_itl_ms=_metric(metrics, "inter_chunk_latency", "p50"),
        p99_itl_ms=_metric(metrics, "inter_chunk_latency", "p99"),
        duration_s=_metric(metrics, "benchmark_duration"),
        completed=_int(completed),
    )
    errors = _metric(metrics, "error_request_count")
    if errors is not None:
        res["failed"] = _int(errors)
    else:
        res["failed"] = _failed(res["num_prompts"], res["completed"])
    return res


def parse_result(text, tool, strategy=None, concurrency=None, num_prompts=None):
    if tool == "bench_serving":
        return parse_bench_serving(text, strategy, concurrency, num_prompts)
    if tool == "aiperf":
        return parse_aiperf(text, strategy, concurrency, num_prompts)
    raise BenchError("unknown benchmark tool %r (one of %s)" % (tool, ", ".join(TOOLS)))
