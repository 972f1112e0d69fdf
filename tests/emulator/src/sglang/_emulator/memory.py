"""GPU memory arithmetic of the emulated server (TEST DOUBLE): weights, KV pool, failures.

The byte counts come from the collection's capacity model (``_vendor``: the planner's
``plugins/module_utils/prepare/_capacity*.py``, vendored into the wheel). Nothing is re-modelled
here. This file adds three things:

1. the emulated GPU: ``SGLANG_EMULATOR_GPU_MEMORY_MIB`` per GPU (default 97887 MiB, an RTX
   PRO 6000 Blackwell as nvidia-smi reports it);
2. the PP split the real server uses: ``SGLANG_PP_LAYER_PARTITION`` if set, otherwise
   ``get_pp_indices``' default split. It is never the planner's recommended split;
3. the way each emulated release fails, with the release's own exception type and message
   text. All checks run in the scheduler's init, before the HTTP port opens.

Sources for (3). Line numbers refer to the released wheels on PyPI
(``sglang-<R>-*.whl``, paths under ``sglang/srt/``).

KV pool too small. SGLang computes ``rest = avail_after_load - avail_before_load *
(1 - mem_fraction_static)`` and ``max_total_num_tokens = rest // cell_size``:

- 0.4.6.post5, ``model_executor/model_runner.py:897-900`` (``init_memory_pool``):
  ``RuntimeError("Not enough memory. Please try to increase --mem-fraction-static.")``
- 0.5.4.post3, ``model_executor/model_runner.py:1626-1630``; 0.5.9,
  ``model_executor/model_runner_kv_cache_mixin.py:415-419``:
  ``RuntimeError(f"Not enough memory. Please try to increase --mem-fraction-static. "
  f"Current value: {self.server_args.mem_fraction_static=}")``
- 0.5.23, ``mem_cache/kv_cache_configurator.py:3042-3058`` (``_profile_available_bytes``):
  when ``rest <= 0`` it raises ``ValueError("Loaded weights leave no GPU memory for the
  KV cache under --mem-fraction-static=<f>. Raise --mem-fraction-static above <s:.3f>
  (minimum viable = 1 - available/pre = <m:.4f>). If using speculative decoding, draft
  weights are now counted.")``. When ``rest`` is positive but smaller than one page of
  tokens, ``model_executor/pool_configurator.py:94-99`` (``MemoryPoolConfig.__post_init__``,
  built by ``calculate_pool_sizes``, l.637-646, without a fraction) raises
  ``RuntimeError("Not enough memory. Please try to increase --mem-fraction-static.")``.

Weights larger than the GPU. The weight loader allocates until torch's caching allocator
raises ``torch.OutOfMemoryError`` ("CUDA out of memory. Tried to allocate ..."). That text
is torch's (``c10/cuda/CUDACachingAllocator.cpp``), not SGLang's. SGLang logs
``Load weight begin`` before it (0.4.6.post5 ``model_runner.py:501-503``; 0.5.23
``model_runner.py:1273-1275``) and never logs ``Load weight end``.

No room for activations. A fraction that leaves less than the planner's
``MIN_RESERVED_MIB`` (4096 MiB, planner policy) outside the static pool runs out of memory
in CUDA graph capture, which comes right after the KV pool is allocated. The capture
wraps the torch error:

- 0.4.6.post5, ``model_executor/cuda_graph_runner.py:304-316``:
  ``Exception(f"Capture CUDA graph failed: {e}\\n" "Possible solutions:\\n" ...)``
- 0.5.4.post3, ``model_executor/cuda_graph_runner.py:379-385`` (message l.902-909);
  0.5.9, ``model_executor/cuda_graph_runner.py:368-374`` (message l.935-942):
  ``Exception(f"Capture cuda graph failed: {e}\\n{CUDA_GRAPH_CAPTURE_FAILED_MSG}")``
- 0.5.23, ``model_executor/runner/decode_cuda_graph_runner.py:597-604``; message from
  ``model_executor/runner_backend_utils/__init__.py:14-21``. Its solutions name
  ``--cuda-graph-max-bs-decode`` and ``--cuda-graph-backend-decode=disabled``.

With CUDA graphs disabled, no capture runs, so this check is skipped (see the README's
"Limits" section).

Success. The scheduler logs ``max_total_num_tokens=..., chunked_prefill_size=...,
max_prefill_tokens=..., max_running_requests=..., context_len=...``:
0.4.6.post5 ``managers/scheduler.py:332-339``. 0.5.4.post3 (``scheduler.py:411-423``),
0.5.9 (``scheduler.py:618-628``) and 0.5.23 (``scheduler.py:1267-1276``) add
``, available_gpu_mem=<x.xx> GB``. The value also reaches ``/get_server_info`` and
``/server_info`` through ``scheduler_info`` (0.4.6.post5 ``scheduler.py:2301``; 0.5.23
``scheduler.py:1945``).
"""

import math
import os

from sglang._emulator.release import version_tuple

GPU_MEMORY_ENV = "SGLANG_EMULATOR_GPU_MEMORY_MIB"
DEFAULT_GPU_MEMORY_MIB = 97887  # RTX PRO 6000 Blackwell, nvidia-smi (prereqs.md §2)
GIB = float(1 << 30)
MIB = float(1 << 20)


class OutOfMemoryError(RuntimeError):
    """Stand-in for ``torch.OutOfMemoryError`` (a RuntimeError subclass in torch)."""


OutOfMemoryError.__module__ = "torch"


def gpu_memory_mib():
    raw = os.environ.get(GPU_MEMORY_ENV, "").strip()
    try:
        val = float(raw) if raw else DEFAULT_GPU_MEMORY_MIB
    except ValueError:
        val = DEFAULT_GPU_MEMORY_MIB
    return val if val > 0 else DEFAULT_GPU_MEMORY_MIB


def _format_size(num):
    """torch's ``format_size`` (CUDACachingAllocator.cpp)."""
    if num <= 1024:
        return "%d bytes" % num
    if num <= 1048576:
        return "%.2f KiB" % (num / 1024.0)
    if num <= 1073741824:
        return "%.2f MiB" % (num / 1048576.0)
    return "%.2f GiB" % (num / 1073741824.0)


def torch_oom_text(tried, total, free, in_use):
    """The message of a CUDA ``torch.OutOfMemoryError`` (device 0), as torch words it."""
    return ("CUDA out of memory. Tried to allocate %s. GPU 0 has a total capacity of %s of "
            "which %s is free. Including non-PyTorch memory, this process has %s memory in "
            "use. Of the allocated memory %s is allocated by PyTorch, and %s is reserved by "
            "PyTorch but unallocated. If reserved but unallocated memory is large try "
            "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
            "fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
            % (_format_size(tried), _format_size(total), _format_size(free),
               _format_size(in_use), _format_size(in_use), _format_size(0)))


def _capture_solutions(release):
    v = version_tuple(release)
    if v >= (0, 5, 23):
        # runner_backend_utils/__init__.py:14-21
        return ("Possible solutions:\n"
                "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
                "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
                "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. "
                "(Not recommended. Huge performance loss)\n"
                "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/"
                "choose \n")
    return ("Possible solutions:\n"
            "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
            "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
            "3. disable torch compile by not using --enable-torch-compile\n"
            "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge "
            "performance loss)\n"
            "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/"
            "choose \n")


def capture_failure(release, oom_text):
    """(exception type, message) of a CUDA-graph capture that ran out of memory."""
    word = "CUDA" if version_tuple(release) < (0, 5) else "cuda"
    return Exception, "Capture %s graph failed: %s\n%s" % (word, oom_text,
                                                           _capture_solutions(release))


def kv_failure(release, fraction, rest_gb, avail_gb, pre_gb):
    """(exception type, message) when the KV pool gets no token (``rest`` in GiB)."""
    v = version_tuple(release)
    base = "Not enough memory. Please try to increase --mem-fraction-static."
    if v >= (0, 5, 23):
        if rest_gb <= 0:
            minimum = 1 - avail_gb / pre_gb
            suggested = math.ceil(minimum * 1000) / 1000
            return ValueError, (
                "Loaded weights leave no GPU memory for the KV cache under "
                "--mem-fraction-static=%s. Raise --mem-fraction-static above %.3f "
                "(minimum viable = 1 - available/pre = %.4f). If using speculative "
                "decoding, draft weights are now counted." % (fraction, suggested, minimum))
        return RuntimeError, base
    if v >= (0, 5):
        return RuntimeError, "%s Current value: self.server_args.mem_fraction_static=%r" % (
            base, fraction)
    return RuntimeError, base


def _cuda_graph_disabled(args):
    """No decode CUDA graph is captured (each release's flags: ``server_args.decode_graph_asked``)."""
    from sglang._emulator import server_args as _server_args  # pylint: disable=import-outside-toplevel

    return _server_args.decode_graph_disabled(args)


def _default_chunked_prefill(gpu_mib):
    # Only for the log line; the same GPU-memory bands as prereqs.md §9.3 step 6.
    for limit, chunk in ((20 * 1024, 2048), (35 * 1024, 2048), (60 * 1024, 4096),
                         (160 * 1024, 8192)):
        if gpu_mib < limit:
            return chunk
    return 16384


class Skip(Exception):
    """No memory arithmetic for this start; the message says why (logged as a warning)."""


def _config_path(model_path):
    if not model_path:
        return None
    path = os.path.join(str(model_path), "config.json")
    return path if os.path.isfile(path) else None


def default_max_running_requests(mem, args=None):
    """``max_running_requests`` when the flag is not given: the 0.5.9 default
    (``model_executor/model_runner_kv_cache_mixin.py:344-353``) for every release."""
    args = args or {}
    if args.get("max_running_requests"):
        return int(args["max_running_requests"])
    tokens = mem["max_total_num_tokens"]
    context_len = mem["context_len"] or 0
    return min(max(int(tokens / context_len * 512) if context_len else 2048, 2048), 4096)


def plan(release, args, layout, gpu_mib=None):
    """Memory plan (a dict) of this start, or None when the model has no config.json.

    Raises :class:`Skip` when the capacity model cannot size it (unknown architecture,
    a layout it rejects, an unknown KV dtype, ...).
    """
    if _config_path(args.get("model_path")) is None:
        return None
    from sglang._emulator import _vendor  # pylint: disable=import-outside-toplevel

    cap = _vendor.load()
    gpu_mib = gpu_memory_mib() if gpu_mib is None else float(gpu_mib)
    tp, pp, ep = layout["tp_size"], layout["pp_size"], layout["ep_size"]
    dp_attention = bool(layout["enable_dp_attention"])
    dp = layout["attn_dp_size"] if dp_attention else layout["dp_size"]
    nnodes = max(layout["nnodes"], 1)
    need = tp * pp * (1 if dp_attention else dp)
    fraction_arg = args.get("mem_fraction_static")
    kv_dtype = args.get("kv_cache_dtype") or "auto"
    try:
        spec = cap.load_model(str(args["model_path"]))
        if pp > 1:
            partition = os.environ.get("SGLANG_PP_LAYER_PARTITION") or ",".join(
                str(n) for n in cap.default_pp_partition(spec.num_layers, pp))
        else:
            partition = None
        if need % nnodes:
            raise cap.LayoutError("%d GPUs do not split over %d nodes" % (need, nnodes))
        res = cap.plan_layout(
            spec, {"tp": tp, "pp": pp, "ep": ep, "dp": dp}, need // nnodes, gpu_mib,
            mem_fraction_static=fraction_arg, kv_dtype=kv_dtype, nnodes=nnodes,
            dp_attention=dp_attention, pp_partition=partition)
        # exact bytes per stage (plan_layout rounds to 0.01 GiB)
        lay = cap._Layout(spec, tp, pp, ep, dp, dp_attention)  # pylint: disable=protected-access
        stage_weights = lay.stage_weights(res["pp_stage_layers"])
    except cap.CannotPlan as exc:
        raise Skip(str(exc)) from None
    fraction = float(fraction_arg) if fraction_arg is not None else res["mem_fraction_static"]
    gpu_bytes = gpu_mib * MIB
    budget = gpu_bytes * fraction
    page = int(args.get("page_size") or 1)
    stages = []
    for layers, weights, cell in zip(res["pp_stage_layers"], stage_weights,
                                     res["kv_bytes_per_token_per_stage"]):
        rest = budget - weights
        tokens = int(rest // cell) if rest > 0 else 0
        stages.append({"layers": layers, "weights_bytes": weights, "cell_bytes": cell,
                       "rest_bytes": rest, "tokens": tokens // page * page})
    worst = min(stages, key=lambda s: (s["rest_bytes"] > 0, s["tokens"]))
    tokens = min(s["tokens"] for s in stages)
    max_total = args.get("max_total_tokens")
    if max_total and tokens > 0:
        tokens = min(tokens, int(max_total)) // page * page
    heaviest = max(s["weights_bytes"] for s in stages)
    context_len = int(args.get("context_length") or spec.max_context or 0) or None
    pre_gb = gpu_bytes / GIB
    out = {
        "gpu_memory_mib": gpu_mib,
        "mem_fraction_static": fraction,
        "mem_fraction_static_source": ("--mem-fraction-static" if fraction_arg is not None
                                       else "planner default (SGLang 0.5.10 formula)"),
        "kv_cache_dtype": kv_dtype,
        "weights_per_gpu_gib": [round(s["weights_bytes"] / GIB, 2) for s in stages],
        "pp_stage_layers": [s["layers"] for s in stages],
        "pp_layer_partition": partition,
        "kv_bytes_per_token": [int(s["cell_bytes"]) for s in stages],
        "max_total_num_tokens": tokens,
        "context_len": context_len,
        "attention": spec.attention,
        "architecture": spec.architecture,
        "failure": None,
    }
    # 1. weights do not fit the GPU at all: torch OOM while loading
    if heaviest > gpu_bytes:
        stage = max(stages, key=lambda s: s["weights_bytes"])
        tried = heaviest / max(stage["layers"], 1)  # about one decoder layer's tensors
        loaded = math.floor(gpu_bytes / tried) * tried
        out["failure"] = {
            "phase": "load", "loaded_fraction": gpu_bytes / heaviest,
            "exc_type": OutOfMemoryError,
            "message": torch_oom_text(int(tried), int(gpu_bytes), int(gpu_bytes - loaded),
                                      int(loaded)),
        }
        return out
    # 2. no KV cache left
    if worst["rest_bytes"] <= 0 or tokens <= 0:
        avail_gb = pre_gb - worst["weights_bytes"] / GIB
        exc_type, msg = kv_failure(release, fraction, worst["rest_bytes"] / GIB, avail_gb,
                                   pre_gb)
        out["failure"] = {"phase": "kv", "exc_type": exc_type, "message": msg}
        return out
    # 3. the fraction leaves no room for activations: OOM in CUDA graph capture
    room_mib = gpu_mib * (1.0 - fraction)
    out["activation_room_mib"] = round(room_mib, 1)
    if room_mib < cap.MIN_RESERVED_MIB and not _cuda_graph_disabled(args):
        free = max(room_mib, 0.0) * MIB * 0.1
        exc_type, msg = capture_failure(release, torch_oom_text(
            int(GIB), int(gpu_bytes), int(free), int(gpu_bytes - free)))
        out["failure"] = {"phase": "capture", "exc_type": exc_type, "message": msg}
    return out


def after_pool_gb(mem):
    """GPU memory left after the weights and the KV pool ("Memory pool end. avail mem=")."""
    pre_gb = mem["gpu_memory_mib"] * MIB / GIB
    kv_gb = mem["max_total_num_tokens"] * max(mem["kv_bytes_per_token"]) / GIB
    return max(pre_gb - max(mem["weights_per_gpu_gib"]) - kv_gb, 0.0)


def log_lines(release, args, mem, phase):
    """The release's own log lines for a phase that succeeded ("load", "kv", "ready")."""
    pre_gb = mem["gpu_memory_mib"] * MIB / GIB
    weights_gb = max(mem["weights_per_gpu_gib"])
    if phase == "load":
        return ["Load weight end. type=%s, dtype=torch.bfloat16, avail mem=%.2f GB, "
                "mem usage=%.2f GB." % (mem["architecture"] or "Model", pre_gb - weights_gb,
                                        weights_gb)]
    tokens = mem["max_total_num_tokens"]
    kv_gb = tokens * max(mem["kv_bytes_per_token"]) / GIB
    avail = pre_gb - weights_gb - kv_gb
    if phase == "kv":
        lines = []
        if version_tuple(release) < (0, 5, 23):
            if mem["attention"] == "mla":
                lines.append("KV Cache is allocated. #tokens: %d, KV size: %.2f GB"
                             % (tokens, kv_gb))
            else:
                lines.append("KV Cache is allocated. #tokens: %d, K size: %.2f GB, V size: "
                             "%.2f GB" % (tokens, kv_gb / 2, kv_gb / 2))
        lines.append("Memory pool end. avail mem=%.2f GB" % avail)
        return lines
    context_len = mem["context_len"] or 0
    max_reqs = default_max_running_requests(mem, args)
    line = ("max_total_num_tokens=%d, chunked_prefill_size=%s, max_prefill_tokens=%s, "
            "max_running_requests=%d, context_len=%s"
            % (tokens, args.get("chunked_prefill_size") or _default_chunked_prefill(
                mem["gpu_memory_mib"]), args.get("max_prefill_tokens") or 16384, max_reqs,
               context_len))
    if version_tuple(release) >= (0, 5):
        line += ", available_gpu_mem=%.2f GB" % max(avail, 0.0)
    return [line]
