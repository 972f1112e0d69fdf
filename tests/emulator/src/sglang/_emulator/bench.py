"""In-process bench of the emulated server (TEST DOUBLE): what ``sglang.bench_serving``
would measure against the HTTP server, computed without starting one.

:func:`server_model` builds the server's :class:`engine.StepModel` from a launch argv the
way ``main.main`` does (parse, ``server_args`` refusal, layout, memory plan, rates), and
:func:`run` drives the same :class:`engine.Scheduler` the HTTP server runs, on a virtual
clock, with ``concurrency`` closed-loop clients (``bench_serving --max-concurrency``: a
client sends its next request when its previous one completes, after ``client_rtt_s``;
the clients start ``client_rtt_s`` apart).
The result has the keys of a ``bench_serving`` JSONL line, so the collection's own parser
(``_bench_tool.parse_bench_serving``) reads it as it reads the real tool's output.
"""

import os

from sglang._emulator import cli
from sglang._emulator import engine as _engine
from sglang._emulator import layout as _layout
from sglang._emulator import memory as _memory
from sglang._emulator import server_args as _server_args

# A client's turnaround between a completion and its next request, over loopback.
CLIENT_RTT_S = 0.0005


class StartFailure(Exception):
    """The emulated server would not start (the message says where and why)."""


def server_model(release, argv, gpus_per_node=8, gpu_memory_mib=None, ttft_ms=None, rates=None):
    """``(model, info)`` of the server ``python -m sglang.launch_server <argv>`` would run.

    Raises :class:`StartFailure` where the server would exit instead of serving. The
    defaults are the server's: ``gpu_memory_mib`` from ``SGLANG_EMULATOR_GPU_MEMORY_MIB``,
    ``ttft_ms`` from ``SGLANG_EMULATOR_TTFT_MS`` (50), ``rates`` (``(single, ceiling)``) from
    ``layout.rates_for`` of the resolved layout (``SGLANG_EMULATOR_RATES`` first).
    """
    if ttft_ms is None:
        try:
            ttft_ms = float(os.environ.get("SGLANG_EMULATOR_TTFT_MS", "") or 50.0)
        except ValueError:
            ttft_ms = 50.0
    try:
        args = cli.parse(release, list(argv))
    except SystemExit as exc:
        raise StartFailure("argparse exit %s" % exc.code) from None
    refused = _server_args.refusal(release, args)
    if refused is not None:
        raise StartFailure("%s: %s" % (type(refused).__name__, refused))
    lay, _warnings = _layout.resolve(release, args)
    lay["gpus_per_node"] = gpus_per_node
    try:
        _layout.validate(lay, gpus_per_node)
    except _layout.LayoutError as exc:
        raise StartFailure("%s: %s" % (exc.exc_type.__name__, exc.message)) from None
    gpu = _memory.gpu_memory_mib() if gpu_memory_mib is None else float(gpu_memory_mib)
    try:
        mem = _memory.plan(release, args, lay, gpu_mib=gpu)
    except _memory.Skip:
        mem = None
    if mem and mem.get("failure"):
        failure = mem["failure"]
        raise StartFailure("%s during %s: %s" % (failure["exc_type"].__name__, failure["phase"],
                                                 failure["message"]))
    if rates is None:
        rates = _layout.rates_for(lay["name"])
    model = _engine.StepModel.from_server(release, args, lay, mem, rates, ttft_ms / 1000.0,
                                          gpu_mib=gpu)
    gpus = lay["gpus_needed"]
    return model, {"layout": lay, "memory": mem, "gpus": gpus, "engine": model.describe()}


def run(model, concurrency, num_prompts, input_len, output_len, client_rtt_s=CLIENT_RTT_S):
    """One ``bench_serving`` run against ``model`` on a virtual clock: its JSONL line (dict)."""
    concurrency = max(int(concurrency), 1)
    sched = _engine.Scheduler(model)
    now = 0.0
    sent = {}
    tokens = {}
    arrivals = []  # (time, req)
    next_rid = [0]

    def send(at):
        next_rid[0] += 1
        req = _engine.Req(next_rid[0], input_len, output_len)
        sent[req.rid] = at
        tokens[req.rid] = []
        arrivals.append((at, req))

    # the clients start one after the other, as threads or tasks of a real harness do: the
    # first request's prefill starts alone, the next ones queue behind it (a burst sent at
    # one instant would batch every prompt into one forward and keep the clients in step)
    for n in range(min(concurrency, num_prompts)):
        send(n * client_rtt_s)
    finished = 0
    while finished < num_prompts:
        arrivals.sort(key=lambda a: (a[0], a[1].rid))
        while arrivals and arrivals[0][0] <= now:
            sched.submit(arrivals.pop(0)[1])
        fwd = sched.plan()
        if fwd is None:
            if not arrivals:
                break
            now = arrivals[0][0]
            continue
        now += fwd.duration
        done_here = 0
        for req, _index in sched.apply(fwd):
            tokens[req.rid].append(now)
            if len(tokens[req.rid]) == req.n_out:
                finished += 1
                done_here += 1
                if len(sent) < num_prompts:
                    # the server hands out the tokens of one forward one after the other:
                    # the clients of requests done together send their next ones in turn
                    send(now + done_here * client_rtt_s)
    line = _line(sent, tokens, concurrency, input_len, output_len)
    line["emulator_peak_running"] = sched.peak_running
    line["emulator_peak_kv_tokens"] = sched.peak_kv_used
    return line


def _line(sent, tokens, concurrency, input_len, output_len):
    pct = _engine.percentile
    ttfts, tpots, itls, e2es = [], [], [], []
    last = 0.0
    for rid, start in sent.items():
        times = tokens[rid]
        if len(times) < output_len:
            continue
        ttfts.append((times[0] - start) * 1000.0)
        e2es.append((times[-1] - start) * 1000.0)
        if len(times) > 1:
            tpots.append((times[-1] - times[0]) * 1000.0 / (len(times) - 1))
        itls.extend((b - a) * 1000.0 for a, b in zip(times, times[1:]))
        last = max(last, times[-1])
    completed = len(ttfts)
    duration = last if last > 0 else 1e-9
    out = {
        "backend": "sglang", "dataset_name": "random", "emulator_in_process": True,
        "max_concurrency": concurrency, "random_input_len": input_len,
        "random_output_len": output_len, "duration": duration, "completed": completed,
        "total_input_tokens": completed * input_len, "total_output_tokens": completed * output_len,
        "request_throughput": completed / duration,
        "output_throughput": completed * output_len / duration,
    }
    for name, vals in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2e_latency", e2es)):
        out["mean_%s_ms" % name] = sum(vals) / len(vals) if vals else 0.0
        out["median_%s_ms" % name] = pct(vals, 50)
        out["p99_%s_ms" % name] = pct(vals, 99)
    return out


def measure(release, argv, concurrency, num_prompts, input_len, output_len, **kwargs):
    """:func:`server_model` then :func:`run`: the bench line of one candidate and load."""
    model, _info = server_model(release, argv, **kwargs)
    return run(model, concurrency, num_prompts, input_len, output_len)
