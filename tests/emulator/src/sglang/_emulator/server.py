"""The emulated HTTP server: health, info, native and OpenAI-compatible routes."""

import json
import os
import socket
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from sglang._emulator import engine as _engine
from sglang._emulator import pd as _pd
from sglang._emulator.release import version_tuple
from sglang._emulator.state import log, redacted_argv

DEFAULT_MAX_NEW_TOKENS = 128
ADMIN_OPTIONAL = frozenset(["/flush_cache"])
GENERATION_ROUTES = frozenset(["/generate", "/v1/completions", "/v1/chat/completions"])
SECRET_KEYS = ("api_key", "admin_api_key")


class State:
    """Everything the handlers need; ``status`` is Starting until warmup ends."""

    def __init__(self, release, args, layout, engine, rates, argv, memory=None):
        self.release = release
        self.version = version_tuple(release)
        self.args = args
        self.layout = layout
        self.engine = engine
        self.rates = rates
        self.argv = argv
        self.memory = memory  # memory.plan() result; None without a config.json
        self.status = "Starting"
        self.startup_time = time.time()
        self.model_path = args.get("model_path")
        self.served_model_name = args.get("served_model_name") or self.model_path
        self.api_key = args.get("api_key")
        self.admin_api_key = args.get("admin_api_key")
        self.model_config = _read_model_config(self.model_path)
        self.routes = self._routes()
        self.gracefully_exit = False  # set by SIGTERM (see graceful_exit)
        # generation requests the HTTP server holds, from arrival to the end of the answer:
        # what the tokenizer manager's rid_to_state counts for the SIGTERM watchdog
        self._held = 0
        self._held_lock = threading.Lock()
        self.latency = Latency()  # TTFT / inter-token histograms and tokens in flight
        self.pd = None  # pd.PDService of a --disaggregation-mode prefill|decode server

    def _routes(self):
        get = {"/health", "/health_generate", "/get_model_info", "/get_server_info",
               "/v1/models", "/flush_cache", "/"}
        post = {"/generate", "/v1/completions", "/v1/chat/completions", "/flush_cache"}
        if self.version >= (0, 5, 9):
            get |= {"/model_info", "/server_info"}
        if self.version >= (0, 5, 23):
            get |= {"/ready", "/ping"}
        if self.args.get("enable_metrics"):
            get.add("/metrics")
        return {"GET": get, "HEAD": set(get), "POST": post, "PUT": {"/generate"}}

    @property
    def up(self):
        return self.status == "Up"

    @property
    def held(self):
        """Generation requests the HTTP server holds now (see ``graceful_exit``)."""
        with self._held_lock:
            return self._held

    def hold(self, n):
        with self._held_lock:
            self._held += n

    def context_length(self):
        if self.args.get("context_length"):
            return int(self.args["context_length"])
        cfg = self.model_config or {}
        for key in ("max_position_embeddings", "max_sequence_length", "seq_length"):
            if isinstance(cfg.get(key), int):
                return cfg[key]
        text_cfg = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
        if isinstance(text_cfg.get("max_position_embeddings"), int):
            return text_cfg["max_position_embeddings"]
        return 131072

    def model_info(self):
        info = {"model_path": self.model_path,
                "tokenizer_path": self.args.get("tokenizer_path") or self.model_path,
                "is_generation": True}
        if self.version >= (0, 5):
            cfg = self.model_config or {}
            info.update({
                "served_model_name": self.served_model_name,
                "preferred_sampling_params": self.args.get("preferred_sampling_params"),
                "weight_version": self.args.get("weight_version") or "default",
                "load_format": self.args.get("load_format"),
                "reasoning_parser": self.args.get("reasoning_parser"),
                "tool_call_parser": self.args.get("tool_call_parser"),
                "disaggregation_mode": self.args.get("disaggregation_mode"),
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": cfg.get("model_type"),
                "architectures": cfg.get("architectures"),
            })
        info["emulator"] = True
        return info

    def server_info(self):
        info = {}
        for key, val in self.args.items():
            if key in SECRET_KEYS and val:
                val = "<redacted>"
            info[key] = val
        lay = self.layout
        for key in ("tp_size", "pp_size", "ep_size", "dp_size", "nnodes", "node_rank"):
            info[key] = lay[key]
        if "attn_dp_size" in self.args or lay["enable_dp_attention"]:
            info["attn_dp_size"] = lay["attn_dp_size"]
        info["enable_dp_attention"] = lay["enable_dp_attention"]
        info["served_model_name"] = self.served_model_name
        info["tokenizer_path"] = self.args.get("tokenizer_path") or self.model_path
        info.update({
            "version": self.release,
            "frontend": "python",
            "startup_time": self.startup_time,
            "launch_command": "python -m sglang.launch_server " + " ".join(redacted_argv(self.argv)),
            "internal_states": [{
                "avg_spec_accept_length": None,
                "last_gen_throughput": round(self.engine.rate() * max(self.engine.active, 1), 2),
            }],
            # the KV pool from the memory plan (scheduler_info in the real server); a
            # made-up value when --model-path has no config.json
            "max_total_num_tokens": (self.memory["max_total_num_tokens"] if self.memory
                                     else self.context_length() * 4),
            "emulator": True,
            "emulator_layout": lay["name"],
            "emulator_gpus_per_node": lay.get("gpus_per_node"),
            "emulator_memory": ({k: v for k, v in self.memory.items() if k != "failure"}
                                if self.memory else None),
            "emulator_rates": {"single": self.rates[0], "ceiling": self.rates[1],
                               "source": self.rates[2]},
            "emulator_engine": self.engine.model.describe(),
            "emulator_pd": self.pd.describe() if self.pd is not None else None,
        })
        return info

    def metric_labels(self, scheduler):
        """The labels SGLang puts on its series (prometheus_client prints them sorted).

        Scheduler gauges: ``model_name`` and ``engine_type`` (0.4.6.post5
        ``managers/scheduler.py`` l.549-555), plus ``tp_rank`` and ``pp_rank`` (0.5.4.post3
        ``managers/scheduler_metrics_mixin.py`` l.63-68), plus ``moe_ep_rank`` (0.5.9
        l.114-120); only TP rank 0 of PP rank 0 reports here (no
        ``--enable-metrics-for-all-schedulers``). Tokenizer counters: ``model_name`` only
        (0.5.9 ``managers/tokenizer_manager.py`` l.433-436).
        """
        labels = {"model_name": self.served_model_name}
        if scheduler:
            # DisaggregationMode.to_engine_type: prefill / decode / unified
            labels["engine_type"] = {"prefill": "prefill", "decode": "decode"}.get(
                self.args.get("disaggregation_mode"), "unified")
            if self.version >= (0, 5):
                labels.update({"tp_rank": "0", "pp_rank": "0"})
            if self.version >= (0, 5, 9):
                labels["moe_ep_rank"] = "0"
        return labels

    def metrics(self):
        """The Prometheus text exposition of ``/metrics`` (served with ``--enable-metrics``).

        Names and help texts are SGLang's (``srt/metrics/collector.py``; 0.5.9:
        ``SchedulerMetricsCollector`` l.306-359, ``TokenizerMetricsCollector`` l.1104-1177).
        ``num_running_reqs`` is the requests admitted to the running batch,
        ``num_queue_reqs`` those waiting for admission (``--max-running-requests`` or the KV
        pool full, see ``engine.Scheduler``), both as the scheduler last reported them, not
        live (``engine.MetricsReporter``); ``gen_throughput`` is the tokens of the last
        5 s per second; ``token_usage`` is the KV tokens the requests in flight hold (prompt
        and generated so far) over ``max_total_num_tokens``. The tokenizer's histograms
        ``time_to_first_token_seconds`` and ``inter_token_latency_seconds`` (before 0.5:
        ``time_per_output_token_seconds``) carry ``model_name`` only.
        """
        e = self.engine
        gen_throughput = e.gen_throughput()
        running, queued = e.reported()  # the scheduler's last report (engine.MetricsReporter)
        series = [
            ("sglang:num_running_reqs", "gauge", "The number of running requests.", True,
             running),
            ("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", True,
             gen_throughput),
            ("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.",
             True, queued),
            ("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
             False, e.prompt_tokens_total),
            ("sglang:generation_tokens_total", "counter",
             "Number of generation tokens processed.", False, e.generation_tokens_total),
            ("sglang:num_requests_total", "counter", "Number of requests processed.", False,
             e.requests_total),
            ("sglang:token_usage", "gauge", "The token usage.", True, self.token_usage()),
        ]
        lines = []
        for name, kind, help_text, scheduler, value in series:
            labels = self.metric_labels(scheduler)
            lines.append("# HELP %s %s" % (name, help_text))
            lines.append("# TYPE %s %s" % (name, kind))
            lines.append("%s{%s} %s" % (name, _labels(labels), _float(value)))
        if self.version >= (0, 5, 9):
            # a labelled counter: no sample of a mode before its first forward
            # (0.5.9 metrics/collector.py l.778-785, .labels(...).inc at l.952)
            name = "sglang:realtime_tokens_total"
            lines.append("# HELP %s Total number of tokens processed (updated on each log "
                         "interval). mode: prefill_compute, prefill_cache, decode." % name)
            lines.append("# TYPE %s counter" % name)
            for mode, value in sorted(getattr(e, "realtime_tokens", {}).items()):
                labels = dict(self.metric_labels(True), mode=mode)
                lines.append("%s{%s} %s" % (name, _labels(labels), _float(value)))
        itl = (("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.")
               if self.version >= (0, 5) else
               ("sglang:time_per_output_token_seconds",
                "Histogram of time per output token in seconds."))
        for (name, help_text), (buckets, counts, total, count) in (
                (("sglang:time_to_first_token_seconds",
                  "Histogram of time to first token in seconds."), self.latency.ttft()),
                (itl, self.latency.itl())):
            labels = self.metric_labels(False)
            lines.append("# HELP %s %s" % (name, help_text))
            lines.append("# TYPE %s histogram" % name)
            for bound, n in zip(list(buckets) + ["+Inf"], counts):
                le = bound if bound == "+Inf" else _float(bound)
                lines.append("%s_bucket{%s} %s" % (name, _labels(dict(labels, le=le)), _float(n)))
            lines.append("%s_count{%s} %s" % (name, _labels(labels), _float(count)))
            lines.append("%s_sum{%s} %s" % (name, _labels(labels), _float(total)))
        if self.pd is not None:  # the release's PD series (pd.metric_specs)
            lines.extend(self.pd.metric_lines(self.metric_labels(True), _labels, _float))
        return "\n".join(lines) + "\n"

    def token_usage(self):
        """KV tokens held by the requests in flight over the pool (SGLang's token_usage)."""
        pool = (self.memory["max_total_num_tokens"] if self.memory
                else self.context_length() * 4)
        return min(1.0, self.latency.tokens_in_flight / float(max(pool, 1)))

    def generate(self, n_tokens, n_prompt=0, body=None, index=0):
        """The engine's tokens, timed into the latency histograms. On a PD server the
        request's bootstrap fields (``body``; item ``index`` of a batch) lead it through
        the KV transfer (``pd.PDService.generate``, which raises ``pd.Abort``)."""
        if self.pd is not None:
            return self.latency.observe(self.pd.generate(n_tokens, n_prompt, body, index), n_prompt)
        return self.latency.observe(self.engine.generate(n_tokens, n_prompt), n_prompt)


class Latency:
    """TTFT and inter-token latency as SGLang's TokenizerMetricsCollector observes them.

    Buckets: a subset of SGLang's (``srt/metrics/collector.py``, TokenizerMetricsCollector
    ``bucket_time_to_first_token`` / ``bucket_inter_token_latency``).
    """

    TTFT_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
    ITL_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)

    def __init__(self):
        self._lock = threading.Lock()
        self.tokens_in_flight = 0
        self._ttft = [[0] * (len(self.TTFT_BUCKETS) + 1), 0.0, 0]
        self._itl = [[0] * (len(self.ITL_BUCKETS) + 1), 0.0, 0]

    @staticmethod
    def _add(hist, buckets, value):
        for i, bound in enumerate(buckets):
            if value <= bound:
                hist[0][i] += 1
        hist[0][-1] += 1
        hist[1] += value
        hist[2] += 1

    def observe(self, tokens, n_prompt):
        start = last = time.monotonic()
        held = n_prompt
        with self._lock:
            self.tokens_in_flight += held
        try:
            for n, tok in enumerate(tokens):
                now = time.monotonic()
                with self._lock:
                    if n == 0:
                        self._add(self._ttft, self.TTFT_BUCKETS, now - start)
                    else:
                        self._add(self._itl, self.ITL_BUCKETS, now - last)
                    self.tokens_in_flight += 1
                    held += 1
                last = now
                yield tok
        finally:
            with self._lock:
                self.tokens_in_flight -= held

    def _read(self, hist, buckets):
        with self._lock:
            return buckets, list(hist[0]), hist[1], hist[2]

    def ttft(self):
        return self._read(self._ttft, self.TTFT_BUCKETS)

    def itl(self):
        return self._read(self._itl, self.ITL_BUCKETS)


def _labels(labels):
    return ",".join('%s="%s"' % (k, _label_value(v)) for k, v in sorted(labels.items()))


def _label_value(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _float(value):
    """A sample value as prometheus_client prints it (``floatToGoString``: ``3.0``)."""
    return repr(float(value))


def _read_model_config(model_path):
    if not model_path:
        return None
    path = os.path.join(model_path, "config.json")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


class BadRequest(Exception):
    pass


def _words_of_messages(messages):
    n = 0
    for msg in messages or []:
        if not isinstance(msg, dict):
            continue
        content = msg.get("content")
        if isinstance(content, str):
            n += _engine.prompt_tokens(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    n += _engine.prompt_tokens(part["text"])
    return n


def _prompt_count(prompt):
    if isinstance(prompt, str):
        return _engine.prompt_tokens(prompt)
    if isinstance(prompt, list):
        if all(isinstance(x, int) for x in prompt):
            return len(prompt)
        return sum(_prompt_count(p) for p in prompt)
    return 0


def _int_param(value, name, default):
    if value is None:
        return default
    try:
        val = int(value)
    except (TypeError, ValueError):
        raise BadRequest("%s must be an integer, got %r" % (name, value)) from None
    if val < 0:
        raise BadRequest("%s must be non-negative, got %d" % (name, val))
    return val


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    state = None  # set on the subclass made by make_server

    # ---- plumbing ----
    def setup(self):
        super().setup()
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        if os.environ.get("SGLANG_EMULATOR_ACCESS_LOG"):
            super().log_message(format, *args)

    def _send(self, code, body=b"", ctype="application/json", extra=None):
        self.send_response(code)
        if body or code not in (204, 304):
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for key, val in (extra or {}).items():
            self.send_header(key, val)
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _json(self, code, obj):
        self._send(code, json.dumps(obj).encode("utf-8"))

    def _read_json(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return {}
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise BadRequest("JSON decode error: %s" % exc) from None
        if not isinstance(data, dict):
            raise BadRequest("the request body must be a JSON object")
        return data

    def _stream_start(self):
        self._streaming = True  # pylint: disable=attribute-defined-outside-init
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _event(self, obj):
        data = b"data: " + (obj if isinstance(obj, bytes) else
                            json.dumps(obj).encode("utf-8")) + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _stream_end(self):
        self._event(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")

    def _authorized(self, path):
        st = self.state
        if self.command == "OPTIONS":
            return True
        if path.startswith(("/health", "/metrics")):
            return True
        if st.version >= (0, 5, 23) and path.startswith("/ready"):
            return True
        auth = self.headers.get("Authorization")
        if path in ADMIN_OPTIONAL and st.admin_api_key:
            return auth == "Bearer " + st.admin_api_key
        if st.api_key:
            return auth == "Bearer " + st.api_key
        return True

    def _dispatch(self):
        path = urlsplit(self.path).path
        st = self.state
        self._streaming = False  # pylint: disable=attribute-defined-outside-init
        allowed = any(path in paths for paths in st.routes.values())
        if st.version >= (0, 5, 23) and path.startswith("/v1/models/"):
            allowed = True
        if not allowed:
            return self._json(404, {"detail": "Not Found"})
        if not self._authorized(path):
            return self._json(401, {"error": "Unauthorized"})
        if path not in st.routes.get(self.command, ()) and not (
                self.command in ("GET", "HEAD") and path.startswith("/v1/models/")):
            return self._json(405, {"detail": "Method Not Allowed"})
        generation = self.command in ("POST", "PUT") and path in GENERATION_ROUTES
        if generation:
            st.hold(1)
        try:
            return self._route(path)
        except _engine.Aborted:
            # dropped by SIGTERM (SGLANG_EMULATOR_SIGTERM_DROPS_RUNNING): the answer ends
            # here, a stream without its last chunk, a plain request without any answer
            self.close_connection = True
            return None
        except BadRequest as exc:
            return self._json(400, {"object": "error", "message": str(exc),
                                    "type": "BadRequest", "param": None, "code": 400})
        except _pd.Abort as exc:
            return self._pd_abort(exc, path)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return None
        finally:
            if generation:
                st.hold(-1)

    do_GET = do_POST = do_PUT = do_HEAD = _dispatch

    def _pd_abort(self, exc, path):
        """A request a PD server aborted (``prepare_abort(req, message, status_code)``),
        answered as 0.5.23 answers it: ``/generate`` 400 ``{"error": {"message"}}``
        (``http_server.py`` ``_create_error_response``), 500 ``{"detail"}`` (the tokenizer
        manager's ``HTTPException``), a stream's last event the output with
        ``finish_reason`` ``{"type": "abort", ...}``; OpenAI routes the ``ErrorResponse``
        (``openai/serving_base.py`` l.119-129), a stream's ``{"error": ...}`` chunk
        (``serving_completions.py`` l.362-371). Then ``[DONE]``."""
        status, message = exc.status, exc.message
        openai = path != "/generate"
        if getattr(self, "_streaming", False):
            if openai:
                self._event({"error": {"object": "error", "message": message,
                                       "type": HTTPStatus(status).name, "param": None,
                                       "code": status}})
            else:
                self._event({"text": "", "output_ids": [], "meta_info": {
                    "id": uuid.uuid4().hex,
                    "finish_reason": {"type": "abort", "message": message,
                                      "status_code": status, "err_type": None},
                    "prompt_tokens": getattr(exc, "prompt_tokens", 0), "completion_tokens": 0,
                    "cached_tokens": 0}})
            self._stream_end()
            return None
        if openai:
            return self._json(status, {"object": "error", "message": message,
                                       "type": "BadRequest" if status == 400 else str(status),
                                       "param": None, "code": status})
        if status == 400:
            return self._json(400, {"error": {"message": message}})
        return self._json(status, {"detail": message})

    # ---- routes ----
    def _route(self, path):
        st = self.state
        if path in ("/health", "/health_generate"):
            if st.gracefully_exit and st.version >= (0, 5):
                return self._send(503)  # shutting down (0.5.x health handler, first check)
            if path == "/health" and st.version < (0, 5):
                return self._send(200)  # 0.4.6.post5: unconditional
            return self._send(200 if st.up else 503)
        if path in ("/ready", "/ping"):
            # 0.5.23 is_ready()/is_healthy() are false from SIGTERM on
            # (srt/managers/tokenizer_manager.py l.728-734; entrypoints/http_server.py
            # l.714-718 /ready, l.2190-2199 /ping)
            return self._send(200 if st.up and not st.gracefully_exit else 503)
        if path in ("/model_info", "/get_model_info"):
            return self._json(200, st.model_info())
        if path in ("/server_info", "/get_server_info"):
            return self._json(200, st.server_info())
        if path == "/v1/models":
            return self._json(200, {"object": "list", "data": [self._model_card()]})
        if path.startswith("/v1/models/"):
            name = path[len("/v1/models/"):]
            if name not in (st.served_model_name, st.model_path):
                return self._json(404, {"error": {
                    "message": "The model '%s' does not exist" % name,
                    "type": "invalid_request_error", "param": "model",
                    "code": "model_not_found"}})
            return self._json(200, self._model_card())
        if path == "/":
            return self._send(200, b"SGLang is running", "text/plain; charset=utf-8")
        if path == "/flush_cache":
            return self._send(200, b"Cache flushed.\nPlease check backend logs for more "
                                   b"details. (When there are running or waiting requests, "
                                   b"the operation will not be performed.)\n",
                              "text/plain; charset=utf-8")
        if path == "/metrics":
            return self._send(200, st.metrics().encode(), "text/plain; version=0.0.4")
        if path == "/generate":
            return self._generate()
        if path == "/v1/completions":
            return self._openai(chat=False)
        if path == "/v1/chat/completions":
            return self._openai(chat=True)
        return self._json(404, {"detail": "Not Found"})

    def _model_card(self):
        st = self.state
        return {"id": st.served_model_name, "object": "model",
                "created": int(st.startup_time), "owned_by": "sglang",
                "root": st.served_model_name, "parent": None,
                "max_model_len": st.context_length()}

    def _generate(self):
        st = self.state
        body = self._read_json()
        text, input_ids = body.get("text"), body.get("input_ids")
        if text is None and input_ids is None:
            raise BadRequest("Either text or input_ids should be provided.")
        sp = body.get("sampling_params") or {}
        if isinstance(sp, list):
            sp = sp[0] if sp else {}
        n_out = _int_param(sp.get("max_new_tokens"), "max_new_tokens",
                           DEFAULT_MAX_NEW_TOKENS)
        batch = (isinstance(text, list) or
                 (isinstance(input_ids, list) and input_ids and
                  isinstance(input_ids[0], list)))
        prompts = (text if isinstance(text, list) else
                   input_ids if batch else [text if text is not None else input_ids])
        if batch and body.get("stream"):
            raise BadRequest("the emulator does not stream batched /generate requests")
        rid = uuid.uuid4().hex
        seed = 0
        if not body.get("stream"):
            results = []
            for idx, prompt in enumerate(prompts):
                n_prompt = (len(prompt) if isinstance(prompt, list)
                            else _engine.prompt_tokens(prompt))
                t0 = time.monotonic()
                toks = list(st.generate(n_out, n_prompt, body, idx))
                results.append({
                    "text": "".join(_engine.token_text(i, seed) for i in toks),
                    "output_ids": [1000 + (i * 7 + seed) % len(_engine.WORDS) for i in toks],
                    "meta_info": self._meta(rid if not batch else "%s-%d" % (rid, idx),
                                            n_prompt, len(toks), n_out, time.monotonic() - t0),
                })
            return self._json(200, results if batch else results[0])
        prompt = prompts[0]
        n_prompt = len(prompt) if isinstance(prompt, list) else _engine.prompt_tokens(prompt)
        self._stream_start()
        parts = []
        t0 = time.monotonic()
        for i in st.generate(n_out, n_prompt, body):
            parts.append(_engine.token_text(i, seed))
            self._event({"text": "".join(parts),
                         "meta_info": self._meta(rid, n_prompt, i + 1, n_out,
                                                 time.monotonic() - t0)})
        self._stream_end()
        return None

    @staticmethod
    def _meta(rid, n_prompt, done, n_out, elapsed):
        finished = done >= n_out
        return {"id": rid,
                "finish_reason": ({"type": "length", "length": n_out} if finished else None),
                "prompt_tokens": n_prompt, "completion_tokens": done, "cached_tokens": 0,
                "e2e_latency": round(elapsed, 6)}

    def _openai(self, chat):
        st = self.state
        body = self._read_json()
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest("messages must be a non-empty list")
            n_prompt = _words_of_messages(messages)
        else:
            if "prompt" not in body:
                raise BadRequest("prompt is required")
            n_prompt = _prompt_count(body.get("prompt"))
        max_tokens = body.get("max_completion_tokens") if chat else None
        if max_tokens is None:
            max_tokens = body.get("max_tokens")
        n_out = _int_param(max_tokens, "max_tokens", DEFAULT_MAX_NEW_TOKENS)
        model = body.get("model") or st.served_model_name
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"

        def usage(done):
            return {"prompt_tokens": n_prompt, "completion_tokens": done,
                    "total_tokens": n_prompt + done, "prompt_tokens_details": None}

        if not body.get("stream"):
            toks = list(st.generate(n_out, n_prompt, body))
            text = "".join(_engine.token_text(i) for i in toks)
            choice = {"index": 0, "logprobs": None, "finish_reason": "length",
                      "matched_stop": None}
            if chat:
                choice["message"] = {"role": "assistant", "content": text,
                                     "reasoning_content": None, "tool_calls": None}
            else:
                choice["text"] = text
            return self._json(200, {"id": rid, "object": obj, "created": created,
                                    "model": model, "choices": [choice],
                                    "usage": usage(len(toks))})
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunk_obj = "chat.completion.chunk" if chat else "text_completion"
        self._stream_start()
        if chat:
            self._event({"id": rid, "object": chunk_obj, "created": created, "model": model,
                         "choices": [{"index": 0, "delta": {"role": "assistant",
                                                            "content": ""},
                                      "logprobs": None, "finish_reason": None}],
                         "usage": None})
        done = 0
        for i in st.generate(n_out, n_prompt, body):
            done = i + 1
            last = done >= n_out
            choice = {"index": 0, "logprobs": None,
                      "finish_reason": "length" if last else None,
                      "matched_stop": None}
            if chat:
                choice["delta"] = {"content": _engine.token_text(i)}
            else:
                choice["text"] = _engine.token_text(i)
            self._event({"id": rid, "object": chunk_obj, "created": created,
                         "model": model, "choices": [choice], "usage": None})
        if include_usage:
            self._event({"id": rid, "object": chunk_obj, "created": created, "model": model,
                         "choices": [], "usage": usage(done)})
        self._stream_end()
        return None


class EmulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024
    allow_reuse_address = True


def graceful_exit(state, exit_now, poll_seconds):
    """SGLang's SIGTERM handling once the server serves (read in the 0.5.9 wheel).

    ``SignalHandler.sigterm_handler`` (``srt/managers/tokenizer_manager.py`` l.2500-2504;
    0.5.23 l.4066-4070), installed on the event loop at the first request (l.1457), only
    sets ``gracefully_exit``. ``sigterm_watchdog`` (l.2113-2149; 0.5.23 l.3508) wakes every
    5 s, then loops: unhealthy or ``SGL_FORCE_SHUTDOWN`` set -> exit at once; otherwise it
    logs "Gracefully exiting... Remaining number of requests N" and sleeps 5 s while any
    request is left, then ``kill_process_tree(os.getpid(), include_parent=True)``
    (``srt/utils/common.py`` l.1129-1153: children SIGKILLed, then itself). New requests
    are still accepted meanwhile (nothing checks the flag on the request path); ``/health``
    answers 503 from the signal on (``srt/entrypoints/http_server.py`` l.474; 0.5.23
    l.731), and from 0.5.23 ``/ready`` and ``/ping`` too (see ``Handler._route``). The
    requests it waits for are the tokenizer manager's ``rid_to_state``: every request the
    HTTP server holds, from its arrival (0.5.23 ``_init_req_state``, l.926; 0.5.9 once
    tokenized, ``_send_one_request`` l.1071) until its last output reached the tokenizer
    manager (l.2774) -- not only the scheduler's running and queued requests. The emulator
    counts :attr:`State.held` (until the answer is written). It ends with status 0 instead
    of SIGKILLing itself, so that systemd does not record the stop as a failure (a
    deliberate difference); 0.5.23 sends its schedulers a ``ShutdownReq`` and waits up to
    15 s for them first (l.3546-3559).
    """
    if state.gracefully_exit:
        return
    state.gracefully_exit = True
    log("SIGTERM received. signum=15. Draining requests and shutting down...")

    def watchdog():
        time.sleep(poll_seconds)
        while True:
            if os.environ.get("SGL_FORCE_SHUTDOWN", "").lower() in ("1", "true", "yes"):
                log("Signal SIGTERM received while force shutdown flag set. Force exiting.")
                break
            remaining = max(state.held, state.engine.in_flight)
            log("Gracefully exiting... Remaining number of requests %d." % remaining)
            if remaining <= 0:
                break
            time.sleep(poll_seconds)
        exit_now(0)

    threading.Thread(target=watchdog, daemon=True).start()


def drop_running(state, exit_now):
    """SIGTERM with ``SGLANG_EMULATOR_SIGTERM_DROPS_RUNNING=1``: a TEST-ONLY fault, not
    what any release does (see :func:`graceful_exit`). Every running and queued request is
    dropped at once (a stream ends without its last chunk, a plain request gets no answer)
    and the process exits 0, so that a test can tell whether a drain left the server idle
    before its stop: with the drain nothing is lost, without it the requests in flight
    are."""
    state.gracefully_exit = True
    running, queued = state.engine.abort_all()
    log("SIGTERM received. signum=15. SGLANG_EMULATOR_SIGTERM_DROPS_RUNNING is set (a "
        "test-only fault): dropping %d running and %d queued request(s) (%d held by the "
        "HTTP server) and exiting now." % (running, queued, state.held))
    time.sleep(0.05)  # let the handlers close their connections
    exit_now(0)


def make_server(state, host, port):
    handler = type("BoundHandler", (Handler,), {"state": state})
    cls = EmulatorHTTPServer
    if ":" in host:
        cls = type("EmulatorHTTPServer6", (EmulatorHTTPServer,),
                   {"address_family": socket.AF_INET6})
    threading.stack_size(512 * 1024)
    return cls((host, port), handler)
