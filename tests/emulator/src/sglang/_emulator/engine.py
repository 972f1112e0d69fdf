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
# The scheduler's idle report of its gauges: at most this long after its last report
# (every release; see MetricsReporter).
IDLE_REPORT_S = 30.0

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

    __slots__ = ("rid", "prompt", "n_out", "prefilled", "out", "reserved", "sink", "aborted")

    def __init__(self, rid, prompt, n_out, sink=None):
        self.rid = rid
        self.prompt = max(int(prompt), 1)  # an empty prompt still has its BOS token
        self.n_out = int(n_out)
        self.prefilled = 0
        self.out = 0
        self.reserved = self.prompt + self.n_out
        self.sink = sink
        self.aborted = False


class Forward:
    __slots__ = ("kind", "chunks", "decoders", "duration", "report")

    def __init__(self, kind, chunks, decoders, duration, report=(0, 0)):
        self.kind = kind            # "prefill" or "decode"
        self.chunks = chunks        # [(req, prompt tokens of this forward)]
        self.decoders = decoders    # requests that get a token at the end
        self.duration = duration
        # (running, queued) as the scheduler reports this forward (see MetricsReporter)
        self.report = report


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
        # what the scheduler reports of this forward: the decoding requests (SGLang's
        # running_batch, without the requests this prefill admits) and the waiting queue
        # after the admission (see MetricsReporter)
        report = (len(decoding), len(self.waiting))
        if chunks:
            tokens = sum(t for _r, t in chunks)
            if model.mixed_chunk:
                return Forward("prefill", chunks, decoding,
                               model.prefill_s(tokens, len(decoding)), report)
            return Forward("prefill", chunks, [], model.prefill_s(tokens), report)
        if decoding:
            return Forward("decode", [], decoding, model.decode_s(len(decoding)), report)
        return None

    def apply(self, fwd):
        """Finish a forward: ``[(req, token index)]`` emitted, in order."""
        emitted = []
        for req, take in fwd.chunks:
            req.prefilled += take
            if req.prefilled >= req.prompt and req.out < req.n_out and not req.aborted:
                emitted.append((req, req.out))  # the prefill forward samples the first token
                req.out += 1
        for req in fwd.decoders:
            if req.aborted:
                continue
            emitted.append((req, req.out))
            req.out += 1
        done = [r for r in self.running if r.prefilled >= r.prompt and r.out >= r.n_out]
        if done:
            self.running = [r for r in self.running if r not in done]
            self.kv_used -= sum(r.reserved for r in done)
        return emitted


class MetricsReporter:
    """When SGLang's scheduler sets its gauges ``sglang:num_running_reqs`` and
    ``sglang:num_queue_reqs``: only when it reports, so that ``/metrics`` shows the last
    report, not the live count (read in the released wheels, paths under ``sglang/srt/``).

    * After each prefill batch (0.5.9 and 0.5.23: after its forward, 0.5.9
      ``managers/scheduler_output_processor_mixin.py`` l.329-335, 0.5.23
      ``managers/scheduler_components/batch_result_processor.py`` l.510; 0.4.6.post5 and
      0.5.4.post3: when the batch is formed, before its forward, ``managers/scheduler.py``
      l.1462-1463 and l.1846-1847): running = the requests that were decoding when the
      batch was formed, *without* the ones it admits (0.5.23 ``managers/scheduler.py``
      l.4363-4367 ``PrefillStats.from_adder(adder, running_batch.reqs)``, the new batch is
      merged into ``running_batch`` at the next ``get_next_batch_to_run``; 0.5.9
      ``managers/scheduler.py`` l.2175-2180 ``running_bs=len(self.running_batch.reqs)``),
      queued = the waiting queue after the admission (0.5.23
      ``managers/scheduler_components/metrics_reporter.py`` l.856-862; 0.5.9
      ``managers/scheduler_metrics_mixin.py`` l.257-265).
    * After a decode step, only every ``--decode-log-interval`` (default 40) steps of a
      counter of decode steps that runs across batches (0.5.23 ``batch_result_processor.py``
      l.1102-1109 and ``metrics_reporter.py`` l.934, l.1076-1081; 0.5.9
      ``scheduler_output_processor_mixin.py`` l.532-535, ``scheduler_metrics_mixin.py``
      l.418-428): running = that decode batch, queued = the waiting queue.
    * Idle (no batch to run, ``on_idle``): 0.5.23 reports at once when its running gauge
      differs from the (empty) running batch, else when its last report is over 30 s old
      (``metrics_reporter.py`` l.1476-1525, gauge_stale; the queue gauge alone being stale
      does not count); 0.5.9 and older only when the last report is over 30 s old
      (0.5.9 ``managers/scheduler_runtime_checker_mixin.py`` l.253-290; 0.4.6.post5
      ``managers/scheduler.py`` l.1269-1286). The time of the last report is set by each
      report (0.5.9 ``metrics/collector.py`` l.1057; 0.5.23
      ``observability/metrics_collector.py`` l.1767) and at start.

    A request the HTTP server holds but the scheduler has not received (tokenizing, in the
    tokenizer manager's ``rid_to_state``) is counted by neither gauge; the emulator has no
    such phase. So a 0 read from ``/metrics`` can be stale: up to 40 decode steps while
    requests admitted by the last prefill decode, and a non-zero value can stay up to 30 s
    after the server went idle (0.5.9 and older).
    """

    def __init__(self, version=(0, 5, 23), decode_log_interval=40, now=None):
        self.version = tuple(version)
        self.decode_log_interval = max(int(decode_log_interval or 40), 1)
        self.forward_ct_decode = 0
        self.running = 0
        self.queued = 0
        self.last_log_time = time.monotonic() if now is None else now

    def _report(self, report, now):
        self.running, self.queued = report
        self.last_log_time = now

    def before_forward(self, fwd, now):
        if fwd.kind == "prefill" and self.version < (0, 5, 9):
            self._report(fwd.report, now)

    def after_forward(self, fwd, now):
        if fwd.kind == "prefill":
            if self.version >= (0, 5, 9):
                self._report(fwd.report, now)
            return
        self.forward_ct_decode = (self.forward_ct_decode + 1) % (1 << 30)
        if self.forward_ct_decode % self.decode_log_interval == 0:
            self._report(fwd.report, now)

    def on_idle(self, running, queued, now):
        stale = self.version >= (0, 5, 23) and self.running != running
        if stale or now > self.last_log_time + IDLE_REPORT_S:
            self._report((running, queued), now)

    def idle_wait(self, now):
        """Seconds the idle scheduler may sleep before its next idle report changes the
        gauges (None: no report would change them)."""
        if (self.running, self.queued) == (0, 0):
            return None
        return max(self.last_log_time + IDLE_REPORT_S - now, 0.0) + 0.01


class Aborted(Exception):
    """The request was dropped by the scheduler (``SGLANG_EMULATOR_SIGTERM_DROPS_RUNNING``)."""


_ABORT = object()  # what a dropped request's sink receives


class Engine:
    """The HTTP server's generator: the scheduler in real time on its own thread."""

    def __init__(self, single, ceiling, ttft_s, model=None, metrics=None):
        self.model = model or StepModel(single, ceiling, ttft_s)
        self.metrics = metrics or MetricsReporter()
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
        # sglang:realtime_tokens_total by mode, as 0.5.9 and later count it at each forward:
        # a prefill batch's prompt tokens (log_prefill_stats), each decode step's batch size
        # (log_decode_stats_every_iteration; 0.5.9 managers/scheduler_metrics_mixin.py
        # l.244-248 and l.476-483, metrics/collector.py l.778-785 and l.938-952)
        self.realtime_tokens = {}
        self._recent = collections.deque()  # monotonic times of the tokens of the window

    @property
    def active(self):
        """Requests admitted to the running batch now (``/metrics`` shows
        :meth:`reported`)."""
        return len(self._sched.running)

    @property
    def queued(self):
        """Requests waiting for admission now."""
        return len(self._sched.waiting)

    def reported(self):
        """``(running, queued)`` as the scheduler last reported them: the values of
        ``sglang:num_running_reqs`` and ``sglang:num_queue_reqs`` (see MetricsReporter)."""
        with self._lock:
            return self.metrics.running, self.metrics.queued

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
                    self.metrics.on_idle(len(self._sched.running), len(self._sched.waiting),
                                         time.monotonic())
                    self._lock.wait(self.metrics.idle_wait(time.monotonic()))
                    deadline = None
                    fwd = self._sched.plan()
                self.metrics.before_forward(fwd, time.monotonic())
            now = time.monotonic()
            # back to back forwards keep an absolute schedule; after idle time start now
            start = deadline if deadline is not None and deadline > now - 0.05 else now
            deadline = start + fwd.duration
            sleep_until(deadline)
            with self._lock:
                emitted = self._sched.apply(fwd)
                stamp = time.monotonic()
                self.metrics.after_forward(fwd, stamp)
                self._count_realtime(fwd)
                for _req, _index in emitted:
                    self.generation_tokens_total += 1
                    self._recent.append(stamp)
                self._forget(stamp)
                self.peak_active = max(self.peak_active, len(self._sched.running))
            for req, index in emitted:
                req.sink.put(index)

    def _count_realtime(self, fwd):
        """``realtime_tokens`` after one forward: its prompt tokens (prefill_compute) and
        its decoding requests (decode, one token each)."""
        for mode, delta in (("prefill_compute", sum(take for _req, take in fwd.chunks)),
                            ("decode", len(fwd.decoders) if fwd.kind == "decode" else 0)):
            if delta:
                self.realtime_tokens[mode] = self.realtime_tokens.get(mode, 0) + delta

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
            index = sink.get()
            if index is _ABORT:
                raise Aborted("request %d dropped after %d of %d tokens" % (req.rid, _n, n_tokens))
            yield index

    def abort_all(self):
        """Drop every running and queued request at once (the test-only SIGTERM fault
        ``SGLANG_EMULATOR_SIGTERM_DROPS_RUNNING``): each one's :meth:`generate` raises
        :class:`Aborted`. Returns ``(running, queued)`` dropped."""
        with self._lock:
            running, waiting = list(self._sched.running), list(self._sched.waiting)
            for req in running + waiting:
                req.aborted = True
            self._sched.running = []
            self._sched.waiting.clear()
            self._sched.kv_used = 0
            self._lock.notify_all()
        for req in running + waiting:
            req.sink.put(_ABORT)
        return len(running), len(waiting)


def percentile(values, q):
    """numpy's default (linear) percentile, as bench_serving computes its p50/p99."""
    vals = sorted(values)
    if not vals:
        return 0.0
    pos = (len(vals) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)
