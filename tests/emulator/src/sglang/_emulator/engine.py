"""Fake token generation, paced by a model of SGLang's scheduler (TEST DOUBLE).

ONE model serves both paths:

* the HTTP server (:class:`Engine`): a scheduler thread runs the forwards in real time,
  sleeping to each forward's absolute monotonic deadline (so sleep overshoot does not
  accumulate), and hands each request its tokens;
* the in-process bench (``sglang._emulator.bench``): the same :class:`Scheduler` and
  :class:`StepModel` on a virtual clock, with closed-loop clients like ``bench_serving
  --max-concurrency``.

The scheduler does what SGLang's does, in the parts the searched knobs reach (paths under
``python/sglang/srt/`` of sgl-project/sglang):

* Prefill first: ``managers/scheduler.py`` ``Scheduler.get_next_batch_to_run`` runs a new
  prefill batch (``get_new_batch_prefill``) when one can be formed, else a decode step of
  the running batch. Without ``--enable-mixed-chunk`` a prefill forward stalls every
  running request for its whole duration; with it the running requests ride along in the
  prefill forward (``ScheduleBatch.mix_with_running``) and each gets its token.
* ``--max-running-requests`` caps the batch: ``get_new_batch_prefill`` returns None and sets
  ``batch_is_full`` once ``len(running_batch.reqs) >= max_running_requests``.
* The KV cache bounds the running requests: ``managers/schedule_policy.py`` ``PrefillAdder``
  admits a waiting request only while its tokens fit ``rem_total_tokens`` (the free KV
  pool less what the running requests will still write). The pool is
  ``max_total_num_tokens`` of ``memory.plan`` (set by ``--mem-fraction-static``). The
  emulator reserves a request's prompt plus all of its output tokens at admission (SGLang
  estimates the output part with ``new_token_ratio`` and retracts on overflow; the
  emulator never needs to retract).
* ``--chunked-prefill-size`` bounds the prompt tokens of one prefill forward
  (``PrefillAdder.rem_chunk_tokens``; a longer prompt becomes the ``chunked_req`` and goes on
  in the next forward, before any decode step). Each forward pays a fixed cost, so small
  chunks raise TTFT; with mixed chunk a forward is one decode step of the riders, so large
  chunks make long decode stalls (ITL spikes); without it the decoders wait for all the
  chunks of a prompt, back to back.
* Above the largest captured decode batch a decode step runs without CUDA graphs:
  ``model_executor/cuda_graph_runner.py`` ``CudaGraphRunner.can_run`` is false when
  ``batch_size > max_bs`` (0.5.9 l.385-404; ``max_bs = max(capture_bs)``, l.308), and
  ``ModelRunner.forward`` then runs the eager ``forward_decode``, paying the kernel launches
  the graph replay hides (:data:`EAGER_STEP_FACTOR` of the step's fixed cost, the
  emulator's own figure). With ``--disable-cuda-graph-padding`` only a captured size runs
  the graph (``graph_key in self.graphs``). So does every step with the decode graph off.
  The capture list comes from ``server_args.derive`` in each release's names: up to 0.5.9
  ``--cuda-graph-max-bs`` / ``--cuda-graph-bs`` / ``--disable-cuda-graph``; in 0.5.23
  ``--cuda-graph-max-bs-decode`` / ``--cuda-graph-bs-decode`` / ``--cuda-graph-config``'s
  ``decode``, off with ``--cuda-graph-backend-decode disabled``,
  ``--disable-decode-cuda-graph`` or the deprecated ``--disable-cuda-graph``
  (``srt/arg_groups/cuda_graph_hook.py:32-101``; the runner's check is
  ``model_executor/runner/decode_cuda_graph_runner.py:870-891``). The prefill CUDA graph
  (0.5.23 ``--cuda-graph-*-prefill``) is not modelled.

Per-step costs of a layout: the layout's ``single`` (tok/s of one request) and ``ceiling``
(aggregate tok/s, ``layout.rates_for``) give a decode step of b requests
``max(1 / single, b / ceiling)`` seconds: a fixed cost (weights read once, TP all-reduces
over PCIe for tp8; fewer and smaller collectives with EP) and a per-request cost. A
request therefore decodes at ``min(single, ceiling / b)`` tok/s, as before this model. A
prefill forward of p prompt tokens costs ``ttft_s + p / (PREFILL_PER_DECODE * ceiling)``
(``SGLANG_EMULATOR_TTFT_MS`` is the fixed cost, so a short prompt on an idle server still
sees its first token after ``ttft_s``).
"""

import collections
import math
import queue
import threading
import time

# Seconds over which /metrics' sglang:gen_throughput counts the generated tokens.
THROUGHPUT_WINDOW_S = 5.0
# Prefill tokens per second per decode token per second of the layout's ceiling.
PREFILL_PER_DECODE = 10.0
# Extra cost of an eager decode step (no CUDA graph), in units of the step's fixed cost.
EAGER_STEP_FACTOR = 0.5

WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
    "november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee "
    "zulu amber basalt cobalt dune ember fjord glacier harbor island jasper karst "
    "lagoon meadow nebula orchid prairie quartz river summit tundra umber valley willow"
).split()


def prompt_tokens(text):
    """One token per whitespace-separated word."""
    if text is None:
        return 0
    return len(str(text).split())


def word(i, seed=0):
    return WORDS[(i * 7 + seed) % len(WORDS)]


def token_text(i, seed=0):
    """Text of output token i: words joined by single spaces."""
    return (" " if i else "") + word(i, seed)


def sleep_until(deadline):
    while True:
        delay = deadline - time.monotonic()
        if delay <= 0:
            return
        time.sleep(delay)


def _positive_int(value):
    try:
        val = int(value)
    except (TypeError, ValueError):
        return None
    return val if val > 0 else None


class StepModel:
    """Costs and limits of one server: its layout's rates and its knobs."""

    def __init__(self, single, ceiling, ttft_s, cuda_graph_max_bs=None, cuda_graphs=True,
                 chunked_prefill_size=None, mixed_chunk=False, max_running_requests=None,
                 kv_tokens=None, cuda_graph_bs=None, cuda_graph_padding=True):
        self.single = float(single)
        self.ceiling = float(ceiling)
        self.ttft_s = max(float(ttft_s), 0.0)
        self.cuda_graph_bs = sorted(int(b) for b in cuda_graph_bs) if cuda_graph_bs else None
        # the runner's max_bs is the largest captured size
        self.cuda_graph_max_bs = (max(self.cuda_graph_bs) if self.cuda_graph_bs
                                  else _positive_int(cuda_graph_max_bs))
        self.cuda_graph_padding = bool(cuda_graph_padding)
        self.cuda_graphs = bool(cuda_graphs)
        self.chunked_prefill_size = _positive_int(chunked_prefill_size)  # None/-1: no chunking
        self.mixed_chunk = bool(mixed_chunk)
        self.max_running_requests = _positive_int(max_running_requests)
        self.kv_tokens = _positive_int(kv_tokens)
        self.prefill_tok_s = PREFILL_PER_DECODE * self.ceiling

    @classmethod
    def from_server(cls, release, args, layout, mem, rates, ttft_s, gpu_mib=None):
        """The model of a started server: its parsed args, resolved layout, memory plan
        (``memory.plan``; None without a config.json) and rates (``layout.rates_for``).
        The knobs' defaults are those the release derives (``server_args.derive``)."""
        from sglang._emulator import server_args as _server_args  # pylint: disable=import-outside-toplevel
        from sglang._emulator import memory as _memory  # pylint: disable=import-outside-toplevel

        gpu = gpu_mib if gpu_mib is not None else _memory.gpu_memory_mib()
        asked = dict(args, tp_size=layout["tp_size"], pp_size=layout["pp_size"])
        model = _server_args.model_facts(args.get("model_path") or "")
        try:
            derived, _warnings = _server_args.derive(release, asked, gpu, None, model)
        except _server_args.ServerArgsCheckError:
            derived = asked
        cuda_graphs = not _server_args.decode_graph_disabled(derived)
        kv = mem["max_total_num_tokens"] if mem else None
        mrr = args.get("max_running_requests")
        if not mrr and mem:
            mrr = _memory.default_max_running_requests(mem)
        return cls(rates[0], rates[1], ttft_s,
                   cuda_graph_max_bs=derived.get("cuda_graph_max_bs"), cuda_graphs=cuda_graphs,
                   cuda_graph_bs=derived.get("cuda_graph_bs"),
                   cuda_graph_padding=not derived.get("disable_cuda_graph_padding"),
                   chunked_prefill_size=derived.get("chunked_prefill_size"),
                   mixed_chunk=bool(args.get("enable_mixed_chunk")),
                   max_running_requests=mrr, kv_tokens=kv)

    def describe(self):
        return {"single": self.single, "ceiling": self.ceiling, "ttft_s": self.ttft_s,
                "cuda_graph_max_bs": self.cuda_graph_max_bs, "cuda_graphs": self.cuda_graphs,
                "cuda_graph_padding": self.cuda_graph_padding,
                "chunked_prefill_size": self.chunked_prefill_size, "mixed_chunk": self.mixed_chunk,
                "max_running_requests": self.max_running_requests, "kv_tokens": self.kv_tokens,
                "prefill_tok_s": self.prefill_tok_s}

    def graphed(self, batch):
        if not self.cuda_graphs:
            return False
        if not self.cuda_graph_padding and self.cuda_graph_bs is not None:
            return batch in self.cuda_graph_bs
        return self.cuda_graph_max_bs is None or batch <= self.cuda_graph_max_bs

    def decode_s(self, batch):
        """Seconds of one decode step of ``batch`` requests."""
        fixed = 1.0 / self.single
        step = max(fixed, batch / self.ceiling)
        if not self.graphed(batch):
            step += EAGER_STEP_FACTOR * fixed
        return step

    def prefill_s(self, tokens, riders=0):
        """Seconds of one prefill forward of ``tokens`` prompt tokens (plus ``riders``
        decoding requests with mixed chunked prefill)."""
        prefill = self.ttft_s + tokens / self.prefill_tok_s
        return max(prefill, self.decode_s(riders)) if riders else prefill

    def rate(self, batch):
        """tok/s of one request in a decode batch of ``batch``."""
        return 1.0 / self.decode_s(max(batch, 1))


class Req:
    """One generation request inside the scheduler."""

    __slots__ = ("rid", "prompt", "n_out", "prefilled", "out", "reserved", "sink")

    def __init__(self, rid, prompt, n_out, sink=None):
        self.rid = rid
        self.prompt = max(int(prompt), 1)  # an empty prompt still has its BOS token
        self.n_out = int(n_out)
        self.prefilled = 0
        self.out = 0
        self.reserved = self.prompt + self.n_out
        self.sink = sink


class Forward:
    __slots__ = ("kind", "chunks", "decoders", "duration")

    def __init__(self, kind, chunks, decoders, duration):
        self.kind = kind            # "prefill" or "decode"
        self.chunks = chunks        # [(req, prompt tokens of this forward)]
        self.decoders = decoders    # requests that get a token at the end
        self.duration = duration


class Scheduler:
    """The scheduling decisions, free of any clock (see the module's docstring)."""

    def __init__(self, model):
        self.model = model
        self.waiting = collections.deque()
        self.running = []           # admitted: prefilling or decoding
        self.kv_used = 0
        self.peak_running = 0
        self.peak_kv_used = 0

    def submit(self, req):
        self.waiting.append(req)

    def idle(self):
        return not self.waiting and not self.running

    def _chunked(self):
        for req in self.running:
            if req.prefilled < req.prompt:
                return req
        return None

    def _fits(self, req):
        model = self.model
        if model.max_running_requests is not None and len(self.running) >= model.max_running_requests:
            return False
        if model.kv_tokens is not None and self.running and self.kv_used + req.reserved > model.kv_tokens:
            return False
        return True

    def plan(self):
        """The next forward (prefill first, as ``get_next_batch_to_run``), or None when idle."""
        model = self.model
        budget = model.chunked_prefill_size or float("inf")
        chunks = []
        current = self._chunked()
        if current is not None:
            take = int(min(current.prompt - current.prefilled, budget))
            chunks.append((current, take))
            budget -= take
        # a prompt is cut only where the budget runs out, so at most one is chunked
        while self.waiting and budget > 0:
            req = self.waiting[0]
            if not self._fits(req):
                break
            self.waiting.popleft()
            self.running.append(req)
            self.kv_used += req.reserved
            self.peak_running = max(self.peak_running, len(self.running))
            self.peak_kv_used = max(self.peak_kv_used, self.kv_used)
            take = int(min(req.prompt, budget))
            chunks.append((req, take))
            budget -= take
        decoding = [r for r in self.running if r.prefilled >= r.prompt and r.out < r.n_out]
        if chunks:
            tokens = sum(t for _r, t in chunks)
            if model.mixed_chunk:
                return Forward("prefill", chunks, decoding, model.prefill_s(tokens, len(decoding)))
            return Forward("prefill", chunks, [], model.prefill_s(tokens))
        if decoding:
            return Forward("decode", [], decoding, model.decode_s(len(decoding)))
        return None

    def apply(self, fwd):
        """Finish a forward: ``[(req, token index)]`` emitted, in order."""
        emitted = []
        for req, take in fwd.chunks:
            req.prefilled += take
            if req.prefilled >= req.prompt and req.out < req.n_out:
                emitted.append((req, req.out))  # the prefill forward samples the first token
                req.out += 1
        for req in fwd.decoders:
            emitted.append((req, req.out))
            req.out += 1
        done = [r for r in self.running if r.prefilled >= r.prompt and r.out >= r.n_out]
        if done:
            self.running = [r for r in self.running if r not in done]
            self.kv_used -= sum(r.reserved for r in done)
        return emitted


class Engine:
    """The HTTP server's generator: the scheduler in real time on its own thread."""

    def __init__(self, single, ceiling, ttft_s, model=None):
        self.model = model or StepModel(single, ceiling, ttft_s)
        self.single = self.model.single
        self.ceiling = self.model.ceiling
        self.ttft_s = self.model.ttft_s
        self._lock = threading.Condition()
        self._sched = Scheduler(self.model)
        self._thread = None
        self._next_rid = 0
        self.peak_active = 0
        self.requests_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self._recent = collections.deque()  # monotonic times of the tokens of the window

    @property
    def active(self):
        """Requests admitted to the running batch (``sglang:num_running_reqs``)."""
        return len(self._sched.running)

    @property
    def queued(self):
        """Requests waiting for admission (``sglang:num_queue_reqs``)."""
        return len(self._sched.waiting)

    @property
    def in_flight(self):
        return len(self._sched.running) + len(self._sched.waiting)

    def rate(self):
        return self.model.rate(max(self.active, 1))

    def _forget(self, now):
        horizon = now - THROUGHPUT_WINDOW_S
        while self._recent and self._recent[0] <= horizon:
            self._recent.popleft()

    def gen_throughput(self, now=None):
        """Recent generation throughput (tok/s): tokens of the last THROUGHPUT_WINDOW_S seconds.

        The real scheduler reports the tokens decoded since its last decode log divided by
        the time since then; this is the same idea over a fixed window (0 when idle).
        """
        with self._lock:
            self._forget(time.monotonic() if now is None else now)
            return len(self._recent) / THROUGHPUT_WINDOW_S

    def _start(self):
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)
            self._thread.start()

    def _loop(self):
        deadline = None
        while True:
            with self._lock:
                fwd = self._sched.plan()
                while fwd is None:
                    self._lock.wait()
                    deadline = None
                    fwd = self._sched.plan()
            now = time.monotonic()
            # back to back forwards keep an absolute schedule; after idle time start now
            start = deadline if deadline is not None and deadline > now - 0.05 else now
            deadline = start + fwd.duration
            sleep_until(deadline)
            with self._lock:
                emitted = self._sched.apply(fwd)
                stamp = time.monotonic()
                for _req, _index in emitted:
                    self.generation_tokens_total += 1
                    self._recent.append(stamp)
                self._forget(stamp)
                self.peak_active = max(self.peak_active, len(self._sched.running))
            for req, index in emitted:
                req.sink.put(index)

    def generate(self, n_tokens, n_prompt=0):
        """Yield token indices 0..n_tokens-1, each when the scheduler produced it."""
        if n_tokens <= 0:
            with self._lock:
                self.requests_total += 1
                self.prompt_tokens_total += n_prompt
            return
        sink = queue.SimpleQueue()
        with self._lock:
            self._next_rid += 1
            req = Req(self._next_rid, n_prompt, n_tokens, sink)
            self.requests_total += 1
            self.prompt_tokens_total += n_prompt
            self._sched.submit(req)
            self._start()
            self._lock.notify_all()
        for _n in range(n_tokens):
            yield sink.get()


def percentile(values, q):
    """numpy's default (linear) percentile, as bench_serving computes its p50/p99."""
    vals = sorted(values)
    if not vals:
        return 0.0
    pos = (len(vals) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)
