"""Lifecycle of the emulated ``launch_server``: parse, check the machine, rendezvous,
load weights (port closed), listen, warm up (health 503), ready (200)."""

import json
import os
import signal
import sys
import threading
import time
import traceback

from sglang._emulator import cli, layout as _layout, memory as _memory, rendezvous
from sglang._emulator import pd as _pd
from sglang._emulator import server_args as _server_args
from sglang._emulator.engine import Engine, MetricsReporter, StepModel
from sglang._emulator.release import current_release, version_tuple
from sglang._emulator.state import append_record, env_number, log, redacted_argv

FAULTS = ("crash-during-load", "hang-during-load", "hang-during-capture", "hang-after-listen",
          "crash-on-start")


OutOfMemoryError = _memory.OutOfMemoryError  # shown as torch.OutOfMemoryError


def _exit_now(code):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)  # pylint: disable=protected-access


# The serving state once the HTTP server runs: SIGTERM then drains as SGLang does.
_SERVING = {}


def _install_signals():
    def on_term(signum, _frame):
        state = _SERVING.get("state")
        if signum == signal.SIGTERM and state is not None:
            from sglang._emulator import server as _server
            if os.environ.get("SGLANG_EMULATOR_SIGTERM_DROPS_RUNNING", "") not in ("", "0"):
                _server.drop_running(state, _exit_now)  # a test-only fault, not a release's
                return
            _server.graceful_exit(state, _exit_now,
                                  env_number("SGLANG_EMULATOR_SIGTERM_POLL_SECONDS", 5))
            return
        name = "sigterm" if signum == signal.SIGTERM else "sigint"
        log("Received %s, shutting down the SGLang emulator (pid %d)." % (name, os.getpid()))
        _exit_now(0)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)


def _scheduler_init(exc):
    """Stand-in for the scheduler subprocess's model/device init; dies with ``exc``."""
    raise exc


def _die_in_scheduler(exc, prefix):
    """Print the exception as the scheduler subprocess would, then the parent's line."""
    try:
        _scheduler_init(exc)
    except BaseException:  # pylint: disable=broad-except
        log("Scheduler hit an exception: " + traceback.format_exc().rstrip("\n"), prefix)
    log("Received sigquit from a child process. It usually means the child failed.")
    return 1


def _load_weights(seconds, fault, prefix, release=None, args=None, mem=None):
    """Weight loading (port closed), then the KV pool and CUDA-graph capture.

    With a memory plan (``memory.plan``), the release's own memory failures happen here:
    torch OOM while loading, no KV cache, or OOM in CUDA-graph capture. Without one (no
    ``config.json`` at --model-path), fixed numbers are logged as before.
    """
    shards = 64
    failure = (mem or {}).get("failure")
    if mem is not None:
        log("Load weight begin. avail mem=%.2f GB" % (mem["gpu_memory_mib"] / 1024.0), prefix)
    else:
        log("Load weight begin. avail mem=94.50 GB, mem usage=0.00 GB.", prefix)
    steps = 8
    oom_step = None
    if failure and failure["phase"] == "load":
        oom_step = min(max(int(steps * failure["loaded_fraction"]), 1), steps)
    started = time.monotonic()
    for step in range(steps + 1):
        done = shards * step // steps
        if _is_tp_rank0(prefix):  # tqdm is on for rank 0 only (enable_tqdm)
            _shard_bar(release, 100 * step // steps, done, shards,
                       time.monotonic() - started, last=step == steps)
        if fault == "crash-during-load" and step == steps // 2:
            return _die_in_scheduler(OutOfMemoryError(
                "CUDA out of memory. Tried to allocate 1.75 GiB. GPU 0 has a total capacity of "
                "94.97 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process "
                "has 93.93 GiB memory in use. Of the allocated memory 92.11 GiB is allocated by "
                "PyTorch, and 1.21 GiB is reserved by PyTorch but unallocated. (sglang emulator: "
                "fault crash-during-load)"), prefix)
        if fault == "hang-during-load" and step == steps // 2:
            log("Loading is stuck (sglang emulator fault hang-during-load).", prefix)
            while True:
                time.sleep(3600)
        if step == oom_step:
            return _die_in_scheduler(failure["exc_type"](failure["message"]), prefix)
        if step < steps:
            time.sleep(seconds / steps)
    if mem is None:
        log("Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, "
            "avail mem=18.20 GB, mem usage=76.30 GB.", prefix)
        log("KV Cache is allocated. #tokens: 1048576, K size: 8.00 GB, V size: 8.00 GB", prefix)
        log(_capture_line(release, "begin", 2.2), prefix)
        _capture_graphs(release, fault, prefix, 2.2)
        return 0
    for line in _memory.log_lines(release, args, mem, "load"):
        log(line, prefix)
    if failure and failure["phase"] == "kv":
        return _die_in_scheduler(failure["exc_type"](failure["message"]), prefix)
    for line in _memory.log_lines(release, args, mem, "kv"):
        log(line, prefix)
    log(_capture_line(release, "begin", _memory.after_pool_gb(mem)), prefix)
    if failure and failure["phase"] == "capture":
        return _die_in_scheduler(failure["exc_type"](failure["message"]), prefix)
    _capture_graphs(release, fault, prefix, _memory.after_pool_gb(mem))
    if _is_tp_rank0(prefix):
        for line in _memory.log_lines(release, args, mem, "ready"):
            log(line, prefix)
    return 0


def missing_shards(model_path):
    """Shards that model.safetensors.index.json names and the directory lacks.

    The wording of the refusal is transformers' (utils/hub.py, get_checkpoint_shard_files:
    "... does not appear to have a file named ... which is required according to the
    checkpoint index."); SGLang's own loader (model_loader/weight_utils.py,
    filter_duplicate_safetensors_files) reads the same weight_map.
    """
    index = os.path.join(model_path or "", "model.safetensors.index.json")
    if not os.path.isfile(index):
        return []
    with open(index) as handle:
        weight_map = json.load(handle).get("weight_map") or {}
    return sorted(name for name in set(weight_map.values())
                  if not os.path.isfile(os.path.join(model_path, name)))


def _shard_bar(release, percent, done, total, elapsed, last):
    """tqdm's "Loading safetensors checkpoint shards" bar as the release writes it: up to
    0.5.9 the bar format ends in a newline (one journal line per update, after tqdm's
    carriage return); 0.5.23 dropped it, so updates are joined by carriage returns and only
    the bar's end adds a newline (see plugins/module_utils/rollout/_load_phases.py)."""
    text = "\rLoading safetensors checkpoint shards: %3d%% Completed | %d/%d [%02d:%02d<?, ?it/s]" % (
        percent, done, total, elapsed // 60, elapsed % 60)
    if version_tuple(release) < (0, 5, 23):
        text += "\n"
    elif last:
        text += "\n"
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _capture_graphs(release, fault, prefix, avail):
    """CUDA-graph capture after the KV pool (SGLANG_EMULATOR_CAPTURE_SECONDS, default 1)."""
    if fault == "hang-during-capture":
        log("CUDA graph capture is stuck (sglang emulator fault hang-during-capture).", prefix)
        while True:
            time.sleep(3600)
    seconds = max(env_number("SGLANG_EMULATOR_CAPTURE_SECONDS", 1), 0.0)
    time.sleep(seconds)
    log(_capture_line(release, "end", avail, seconds), prefix)


def _capture_line(release, when, avail, seconds=0.0):
    """The release's CUDA-graph capture lines (model_runner.py up to 0.5.9,
    model_runner_components/cuda_graph_setup.py in 0.5.23)."""
    if version_tuple(release) >= (0, 5, 23):
        if when == "begin":
            return ("Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
                    "avail mem=%.2f GB" % avail)
        return ("Capture target decode CUDA graph end. bs=[1, 2, 4, 8], elapsed=%.2f s, "
                "mem usage=0.50 GB, avail mem=%.2f GB." % (seconds, avail - 0.5))
    if when == "begin":
        return ("Capture cuda graph begin. This can take up to several minutes. avail mem=%.2f GB"
                % avail)
    return ("Capture cuda graph end. Time elapsed: %.2f s. mem usage=0.50 GB. avail mem=%.2f GB."
            % (seconds, avail - 0.5))


def _is_tp_rank0(prefix):
    """The scheduler's debug line comes from TP rank 0 only."""
    return prefix in ("TP0", "node0 TP0")


def main(argv):
    release = current_release()
    _install_signals()
    try:
        args = cli.parse(release, list(argv))
    except ValueError:
        # DeprecatedAction raises ValueError(help) in the real parser: a traceback, exit 1.
        traceback.print_exc()
        return 1
    if not args.get("served_model_name"):
        args["served_model_name"] = args.get("model_path")
    if not args.get("tokenizer_path"):
        args["tokenizer_path"] = args.get("model_path")

    refused_args = _server_args.refusal(release, args)
    if refused_args is not None:
        # prepare_server_args / check_server_args assert before anything starts
        log("Traceback (most recent call last):\n%s: %s"
            % (type(refused_args).__name__, refused_args))
        return 1
    lay, warnings = _layout.resolve(release, args)
    lay["gpus_per_node"] = _layout.machine_gpus()
    prefix = "TP0" if lay["nnodes"] == 1 else "node%d TP%d" % (
        lay["node_rank"], lay["node_rank"] * max(lay["tp_size"] // lay["nnodes"], 1))
    fault = os.environ.get("SGLANG_EMULATOR_FAULT", "").strip() or None
    if fault and fault not in FAULTS:
        log("WARNING: unknown SGLANG_EMULATOR_FAULT=%r ignored (known: %s)"
            % (fault, ", ".join(FAULTS)))
        fault = None
    # SGLANG_EMULATOR_FAULT_NODE_RANKS="1,2": only these ranks of a multi-node server fail
    only_ranks = os.environ.get("SGLANG_EMULATOR_FAULT_NODE_RANKS", "").strip()
    if fault and only_ranks and str(lay["node_rank"]) not in [r.strip() for r in only_ranks.split(",")]:
        fault = None
    rates = _layout.rates_for(lay["name"])
    # what the real server does once its arguments are checked, before any scheduler:
    # 0.5.9 srt/entrypoints/engine.py:1031 logger.info(f"{server_args=}"), the API keys
    # included (the collection's launcher redacts them from the output)
    log("server_args=ServerArgs(%s)" % ", ".join(
        "%s=%r" % (key, args[key]) for key in sorted(args) if not key.startswith("_")))
    append_record("starts.jsonl", {
        "time": time.time(), "pid": os.getpid(), "argv": redacted_argv(argv), "release": release,
        "node_rank": lay["node_rank"], "layout": lay,
        "rates": {"single": rates[0], "ceiling": rates[1], "source": rates[2]},
        "fault": fault, "host": args.get("host"), "port": args.get("port"),
    })
    log("SGLang emulator %s (TEST DOUBLE, no GPU used) starting: layout %s on %d GPU(s)/node "
        "x %d node(s), node_rank %d" % (release, lay["name"], lay["gpus_per_node"],
                                        lay["nnodes"], lay["node_rank"]))
    for w in warnings:
        log(w)
    refused = None
    try:
        _layout.validate(lay, lay["gpus_per_node"])
    except _layout.LayoutError as exc:
        refused = exc
    if refused is not None:
        return _die_in_scheduler(refused.exc_type(refused.message), prefix)
    if fault == "crash-on-start":
        log("sglang emulator fault crash-on-start: exiting with status 1.", prefix)
        return 1
    try:
        mem = _memory.plan(release, args, lay)
    except _memory.Skip as exc:
        log("WARNING: sglang emulator: no memory arithmetic for this start (%s)." % exc)
        mem = None

    links = None
    if lay["nnodes"] > 1:
        timeout = args.get("dist_timeout")
        try:
            if lay["node_rank"] == 0:
                links = rendezvous.Rank0(args.get("dist_init_addr"), lay, release)
                links.wait(timeout=float(timeout) if timeout else None)
            else:
                links = rendezvous.worker_join(args.get("dist_init_addr"), lay, release,
                                               float(timeout) if timeout else 120.0)
                log("Joined rank 0 at %s" % args.get("dist_init_addr"), prefix)
        except (rendezvous.RendezvousError, OSError) as exc:
            log("ERROR: multi-node init failed: %s" % exc, prefix)
            return 1

    # PD (--disaggregation-mode): the transfer engine's init, the prefill's bootstrap server
    pd_failure = _pd.before_load(release, args, lay, mem, prefix)
    if pd_failure is not None:
        return _die_in_scheduler(pd_failure, prefix)
    missing = missing_shards(args.get("model_path"))
    if missing:
        return _die_in_scheduler(OSError(
            "%s does not appear to have a file named %s which is required according to the "
            "checkpoint index." % (args.get("model_path"), missing[0])), prefix)
    rc = _load_weights(env_number("SGLANG_EMULATOR_LOAD_SECONDS", 3), fault, prefix,
                       release, args, mem)
    if rc:
        return rc

    if lay["node_rank"] >= 1:
        return _worker_loop(links, prefix)
    if links is not None:
        def lost(rank):
            log("ERROR: lost connection to node_rank %d (NCCL communicator aborted); "
                "exiting." % rank, prefix)
            _exit_now(1)
        links.monitor(lost)
    return _serve(release, args, lay, rates, argv, fault, mem)


def _worker_loop(sock, prefix):
    log("Worker node is up. No HTTP server runs on node_rank >= 1.", prefix)
    try:
        while sock.recv(4096):
            pass
    except OSError:
        pass
    log("ERROR: rank 0 went away (connection closed); exiting.", prefix)
    return 1


def _serve(release, args, lay, rates, argv, fault, mem=None):
    from sglang._emulator import server as _server

    model = StepModel.from_server(release, args, lay, mem, rates,
                                  env_number("SGLANG_EMULATOR_TTFT_MS", 50) / 1000.0)
    engine = Engine(rates[0], rates[1], model.ttft_s, model=model,
                    metrics=MetricsReporter(version_tuple(release),
                                            args.get("decode_log_interval") or 40))
    engine = _pd.wrap_engine(args, engine)  # a PD server's prefill or decode engine
    state = _server.State(release, args, lay, engine, rates, list(argv), mem)
    _pd.attach(state)
    host = args.get("host") or "127.0.0.1"
    port = int(args.get("port") or 30000)
    try:
        httpd = _server.make_server(state, host, port)
    except OSError as exc:
        sys.stderr.write("ERROR:    [Errno %s] error while attempting to bind on address "
                         "(%r, %d): %s\n" % (exc.errno, host, port,
                                             (exc.strerror or str(exc)).lower()))
        return 1
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.5},
                     daemon=True).start()
    _SERVING["state"] = state
    sys.stderr.write("INFO:     Started server process [%d]\nINFO:     Waiting for "
                     "application startup.\nINFO:     Application startup complete.\n"
                     "INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)\n"
                     % (os.getpid(), host if ":" not in host else "[%s]" % host, port))
    sys.stderr.flush()
    warmup = env_number("SGLANG_EMULATOR_WARMUP_SECONDS", 2)
    log("Start of warmup (sglang emulator: %.2fs)." % warmup)
    time.sleep(max(warmup, 0.0))
    if fault == "hang-after-listen":
        log("Warmup is stuck (sglang emulator fault hang-after-listen); health stays 503.")
    else:
        state.status = "Up"
        log("The server is fired up and ready to roll!")
    while True:
        time.sleep(3600)
