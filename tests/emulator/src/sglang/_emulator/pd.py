"""Prefill/decode (PD) disaggregation of the emulated server (TEST DOUBLE).

What the release does (read in the sglang 0.5.23 and 0.5.9 wheels from PyPI, paths under
``sglang/srt/``; 0.5.9 differences in brackets), and what the emulator does for it:

* ``--disaggregation-mode prefill`` starts the KV **bootstrap server** (an aiohttp app,
  ``disaggregation/common/conn.py`` ``CommonKVBootstrapServer``, started by the tokenizer
  manager, ``managers/disagg_service.py`` ``start_disagg_service``) on ``--host`` and
  ``--disaggregation-bootstrap-port`` (default 8998) while the weights load. Its routes:
  ``GET /health`` ("OK"), ``PUT /route`` (each rank registers its ``rank_ip`` and
  ``rank_port``), ``GET /route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&
  target_pp_rank=-1`` (the prefill's parallel info; 503 "Prefill server not fully
  registered yet" until every rank registered) and the same with ranks (one rank's
  ``rank_ip``/``rank_port``) [0.5.9: ``engine_rank``, ``target_dp_group``,
  ``target_pp_rank`` and ``prefill_attn_tp_size``... keys]. The emulator serves the same
  routes with ``http.server``; its ranks register once the load is done.
* A request carries ``bootstrap_host``, ``bootstrap_port`` and ``bootstrap_room`` in its
  JSON body (``managers/io_struct.py`` ``GenerateReqInput`` l.291-293; smg's PD router
  adds them, ``model_gateway/src/routers/http/pd_types.rs`` ``RequestWithBootstrap``, and
  sends the same request to a prefill and a decode worker at once,
  ``pd_router.rs`` ``execute_dual_dispatch_internal``; it returns the decode's answer once
  the prefill's answer has been read in full). A PD server answers a request without a
  room with 400 "Invalid request: Disaggregated request received without bootstrap room
  id." (``managers/scheduler.py`` l.3047-3062); ``bootstrap_host`` ``2.2.2.2``
  (``FAKE_BOOTSTRAP_HOST``, ``disaggregation/utils.py`` l.53) is a fake transfer.
* The **decode** server fetches the prefill's parallel info from the bootstrap server
  (``try_ensure_parallel_info``, ``disaggregation/common/conn.py`` l.1293; retried once a
  second, 15 tries, ``disaggregation/decode.py`` l.441-443, then the request is aborted),
  waits in its *prealloc queue* until its KV pool holds the request's prompt and output,
  then sends the prefill its KV indices (``send_metadata``) and waits in its *transfer
  queue* for the KV; once it has come the request joins the running batch (the first
  token is the one the prefill sampled) and decodes there. The emulator does the same
  steps over a plain TCP connection to the prefill's ``rank_port``: one JSON line (room,
  bytes wanted), then the prefill writes the bytes back on it and the decode acknowledges
  them. The real release sends the indices over ZMQ and the KV by RDMA/TCP writes of the
  transfer engine (Mooncake, NIXL); the bytes cross the same link.
* The **prefill** server keeps a request in its *bootstrap queue* until the decode's
  indices came (``disaggregation/prefill.py`` ``pop_bootstrapped``; 0.5.23's
  ``--optimistic-prefill-attempts`` is 0 by default), prefills it with ``max_new_tokens``
  1 (``_process_req`` l.480-482), sends its KV and keeps the KV until the transfer is done
  (*inflight queue*); then it answers the request.
* **Timeouts** (``environ.py``: ``SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT`` and
  ``SGLANG_DISAGGREGATION_WAITING_TIMEOUT``, ``EnvInt(300)`` each): a prefill request whose
  indices never come fails after the bootstrap timeout ("Request R timed out after 300.0s
  in KVPoll.Bootstrapping", ``common/conn.py`` l.2385-2410), a decode request whose KV
  never comes fails after the waiting timeout, counted from its indices ("Request R timed
  out after 300.0s in KVPoll.WaitingForInput", l.2888-2915). Each logs its warning once
  and aborts the request with status 500 and the message "Prefill bootstrap failed for
  request rank=0 req.rid='...' req.bootstrap_room=R with exception
  KVTransferError(bootstrap_room=R): ..." (``prefill.py`` ``handle_bootstrap_failure``)
  or "Decode transfer failed for request rank=0 decode_req.req.rid='...'
  decode_req.req.bootstrap_room=R with exception KVTransferError(...): ..."
  (``decode.py`` l.2859-2890). A dead prefill is found by the decode's heartbeat
  (``GET /health`` every ``SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL`` = 5 s, at least 2;
  failed after ``..._HEARTBEAT_MAX_FAILURE`` = 2 misses): "Lost connection with prefill
  instance (bootstrap_addr: H:P)" (l.1998-2106).
* **Metrics**: see :data:`METRICS` (0.5.23 ``observability/metrics_collector.py``
  l.583-699; 0.5.9 ``metrics/collector.py`` l.431-499; 0.5.4.post3 l.294-350), with the
  label ``engine_type`` "prefill" / "decode" (``DisaggregationMode.to_engine_type``).

**How many bytes.** The decode asks for ``prompt tokens x wire bytes per token /
KV_TRANSFER_SCALE``. The wire bytes per token are the decode server's KV bytes per token
and GPU (``memory.plan``'s ``kv_bytes_per_token``, summed over PP stages) times its
attention-TP ranks: each decode rank receives its own copy from one prefill rank (MLA: the
whole latent cache on each rank, ``CommonKVReceiver._setup_bootstrap_infos`` "For MLA:
target_tp_rank is the selected real rank"; MHA: each rank its heads). K2.5 at tp8:
70,272 B x 8 = 562 KB per token, 2.3 GB for a 4,096-token prompt. ``KV_TRANSFER_SCALE``
(default 100, env ``SGLANG_EMULATOR_KV_TRANSFER_SCALE``) divides them, so a test-bed link
of B bytes/s stands for a real link of 100 x B (a ``tc`` limit of 100 MiB/s, 0.84 Gbit/s,
plays an 84 Gbit/s link; loopback, some GB/s, an RDMA fabric).

**The model.** Where PD wins or loses comes from :class:`engine.StepModel` and the link,
not from a setting: a co-located server runs every prefill forward as a stall of its
decoders (``engine.Scheduler``: prefill first, no mixed chunk by default), a prefill
server never decodes, and a decode server never prefills, but a request's first token
waits for its KV to cross the link (FIFO, one transfer at a time; bytes / bandwidth).
:func:`simulate_pd` runs N prefill and M decode servers behind one router on a virtual
clock with the same schedulers as the HTTP servers (:class:`PrefillScheduler`,
:class:`DecodeScheduler`), as ``bench.run`` does for one server: a prefill round robin and
the decode holding the fewest requests, a link out of each prefill server and one into
each decode server. :func:`simulate_pair` is its 1P1D case.
"""

import collections
import heapq
import http.client
import itertools
import json
import os
import queue
import select
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from sglang._emulator import engine as _engine
from sglang._emulator.release import version_tuple
from sglang._emulator.state import env_number, log

# Real KV bytes per byte the emulated servers send each other (see the module docstring).
KV_TRANSFER_SCALE = 100.0
KV_TRANSFER_SCALE_ENV = "SGLANG_EMULATOR_KV_TRANSFER_SCALE"
# KV bytes per token and GPU when --model-path has no config.json: Kimi K2.5 (MLA, 61
# layers of 576 bf16 values), what memory.plan gives for the fixture.
FALLBACK_KV_BYTES_PER_TOKEN = 70272
DEFAULT_BOOTSTRAP_PORT = 8998
FAKE_BOOTSTRAP_HOST = "2.2.2.2"
IB_SYSFS = "/sys/class/infiniband"
IB_SYSFS_ENV = "SGLANG_EMULATOR_IB_SYSFS"
REQUIRE_ENGINE_ENV = "SGLANG_EMULATOR_REQUIRE_TRANSFER_ENGINE"
# decode.py l.441-443: one try per second, 15 tries
ENSURE_RETRIES = 15
ENSURE_RETRY_INTERVAL_S = 1.0
CHUNK = 1 << 20

MOONCAKE_IMPORT_ERROR = (
    "Please install mooncake by following the instructions at "
    "https://kvcache-ai.github.io/Mooncake/getting_started/build.html "
    "to run SGLang with MooncakeTransferEngine.")
NIXL_IMPORT_ERROR = (
    "Please install NIXL by following the instructions at "
    "https://github.com/ai-dynamo/nixl/blob/main/README.md "
    "to run SGLang with NixlTransferEngine.")
BOOTSTRAP_TIMEOUT_WARNING = (
    "Some requests timed out when bootstrapping, which means prefill instances fail to "
    "receive the KV indices from the decode instance of this request. If a greater mean "
    "TTFT is acceptable, you can 'export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600' (10 "
    "minutes) to relax the timeout condition. ")
WAITING_TIMEOUT_WARNING = (
    "Some requests fail to receive KV Cache transfer done signal after bootstrapping. If a "
    "greater mean TTFT is acceptable, you can 'export SGLANG_DISAGGREGATION_WAITING_TIMEOUT="
    "600' (10 minutes) to relax the timeout condition. ")
# common/conn.py l.312-314: what the decode reports when the prefill failed without a reason
PREFILL_FAILED_REASON = "Failed to get kvcache from prefill instance, it might be dead"

# 0.5.23 observability/metrics_collector.py l.637-699
LATENCY_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
SPEED_BUCKETS = (0.1, 0.5, 1, 5, 10, 25, 50, 100, 200, 400)
SIZE_BUCKETS = (1, 5, 10, 50, 100, 500, 1000, 5000, 10000)
BOOTSTRAP_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500)


class Abort(Exception):
    """A request the PD server aborts: ``prepare_abort(req, message, status_code)``."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message
        self.prompt_tokens = 0  # set on the way out (the answer of a /generate stream)


class KVTransferError(Exception):
    """``disaggregation/common/conn.py`` l.103-116 (0.5.9: ``mooncake/conn.py``)."""

    def __init__(self, room, reason):
        super().__init__(reason)
        self.room = room
        self.reason = reason

    def __str__(self):
        return "KVTransferError(bootstrap_room=%s): %s" % (self.room, self.reason)


# ------------------------------------------------------------------ settings

def kv_scale():
    """Real KV bytes per byte sent (:data:`KV_TRANSFER_SCALE`, env overrides it)."""
    scale = env_number(KV_TRANSFER_SCALE_ENV, KV_TRANSFER_SCALE)
    return scale if scale > 0 else KV_TRANSFER_SCALE


def bootstrap_timeout():
    return env_number("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 300, int)


def waiting_timeout():
    return env_number("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", 300, int)


def mode_of(args):
    return (args or {}).get("disaggregation_mode") or "null"


def rdma_devices():
    """The RDMA devices the host shows (``/sys/class/infiniband``, env overrides the path);
    None when the directory does not exist."""
    path = os.environ.get(IB_SYSFS_ENV) or IB_SYSFS
    if not os.path.isdir(path):
        return None
    return sorted(os.listdir(path))


def wire_bytes_per_token(mem, layout):
    """Bytes the decode server's GPUs receive per prompt token (module docstring)."""
    per_rank = sum(mem["kv_bytes_per_token"]) if mem else FALLBACK_KV_BYTES_PER_TOKEN
    tp = int(layout.get("tp_size") or 1)
    if layout.get("enable_dp_attention"):
        tp = max(tp // max(int(layout.get("attn_dp_size") or 1), 1), 1)
    return int(per_rank) * tp


# ------------------------------------------------------------------ ServerArgs

def resolve(release, d, warnings):
    """The PD part of the release's ServerArgs resolution, on the derived dict ``d``.

    0.5.23 ``arg_groups/pd_disaggregation_hook.py`` ``handle_pd_disaggregation`` and
    ``handle_encoder_disaggregation`` (l.325-332, ``validate_ib_devices``,
    ``arg_groups/validation_hook.py`` l.489-560); 0.5.9 ``server_args.py``
    ``_handle_pd_disaggregation`` (l.2546-2571) and ``_validate_ib_devices`` (l.2599-2644);
    0.5.4.post3 l.1650-1676. Raises what the release raises.
    """
    mode = mode_of(d)
    if mode == "null":
        return
    v = version_tuple(release)
    new = v >= (0, 5, 23)
    backend = d.get("disaggregation_transfer_backend") or "mooncake"
    if backend == "mooncake_tcp":
        # 0.5.23 pd_disaggregation_hook.py l.27-45: mooncake with MC_FORCE_TCP=1, no HCA
        d["disaggregation_transfer_backend"] = backend = "mooncake"
        d["disaggregation_ib_device"] = None
    if mode == "decode":
        if not new and v >= (0, 5):
            for flag, name in (("disaggregation_decode_tp", "tp"), ("disaggregation_decode_dp", "dp")):
                if d.get(flag) is not None:
                    raise AssertionError("Cannot set --disaggregation-decode-%s for the decode "
                                         "engine." % name)
        if new and d.get("disaggregation_decode_enable_radix_cache"):
            d["disable_radix_cache"] = False
            warnings.append("EXPERIMENTAL: Radix cache is enabled for decode server")
        else:
            d["disable_radix_cache"] = True
            warnings.append("Radix cache is disabled for decode server" if new
                            else "KV cache is forced as chunk cache for decode server")
    elif mode == "prefill":
        if new and backend == "fake":
            raise AssertionError("Prefill server does not support 'fake' as the transfer backend")
        if not new and v >= (0, 5):
            if v >= (0, 5, 9):
                if not d.get("enable_piecewise_cuda_graph"):
                    d["disable_cuda_graph"] = True
                    warnings.append("Cuda graph is disabled for prefill server when piecewise "
                                    "cuda graph is not enabled.")
            else:
                d["disable_cuda_graph"] = True
                warnings.append("Cuda graph is disabled for prefill server")
    if backend == "mooncake" and v >= (0, 5, 9):
        d["disaggregation_ib_device"] = _validate_ib_devices(
            release, d.get("disaggregation_ib_device"), warnings)


def _validate_ib_devices(release, device_str, warnings):
    new = version_tuple(release) >= (0, 5, 23)
    if device_str is None:
        warnings.append("No IB devices specified for Mooncake backend, falling back to auto "
                        "discovery.")
        return None
    text = str(device_str).strip()
    if not text:
        raise ValueError("No valid IB devices specified")
    path = IB_SYSFS
    devices_dir = os.environ.get(IB_SYSFS_ENV) or IB_SYSFS
    mapping = None
    if new and (text.startswith("{") or text.endswith(".json")):
        mapping = text
    if not new:
        devices = [x.strip() for x in text.split(",") if x.strip()]
        if not devices:
            raise ValueError("No valid IB devices specified")
        if len(devices) != len(set(devices)):
            raise ValueError("Duplicate IB devices specified: %s" % device_str)
    if not os.path.isdir(devices_dir):
        raise RuntimeError("InfiniBand sysfs path not found: %s. Please ensure InfiniBand "
                           "drivers are installed." % path)
    available = set(os.listdir(devices_dir))
    if not available:
        raise RuntimeError("No IB devices found in %s" % path)
    if not new:
        invalid = [x for x in devices if x not in available]
        if invalid:
            raise ValueError("Invalid IB devices specified: %s. Available devices: %s"
                             % (invalid, sorted(available)))
        return ",".join(devices)
    groups = {"all GPUs": text}
    if mapping is not None:
        try:
            parsed = json.loads(mapping) if mapping.startswith("{") else _read_json(mapping)
        except (OSError, ValueError) as exc:
            raise ValueError("Invalid JSON mapping: %s" % mapping) from exc
        groups = {"GPU %s" % k: v for k, v in parsed.items()}
    out = {}
    for context, raw in groups.items():
        devices = [x.strip() for x in str(raw).split(",") if x.strip()]
        if not devices:
            raise ValueError("No valid IB devices specified for %s" % context)
        unique = list(dict.fromkeys(devices))
        invalid = [x for x in unique if x not in available]
        if invalid:
            raise ValueError("Invalid IB devices specified for %s: %s. Available devices: %s"
                             % (context, invalid, sorted(available)))
        out[context] = ",".join(unique)
    if mapping is None:
        return out["all GPUs"]
    return json.dumps({k[4:]: v for k, v in out.items()})


# ------------------------------------------------------------------ transfer engine at init

def _read_json(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _glog(level, where, msg):
    """A line as the transfer engine's glog writes it to stderr."""
    now = time.time()
    stamp = time.strftime("%m%d %H:%M:%S", time.localtime(now))
    try:
        sys.stderr.write("%s%s.%06d %7d %s] %s\n" % (level, stamp, int((now % 1) * 1e6),
                                                     os.getpid(), where, msg))
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def init_transfer_engine(release, args, prefix):
    """The scheduler's transfer-engine init, before the weights load (``None``: fine, else
    the exception the release dies of).

    Mooncake (``distributed/device_communicators/mooncake_transfer_engine.py``
    ``MooncakeTransferEngine``): ``from mooncake.engine import TransferEngine`` (ImportError
    "Please install mooncake ..."), then ``initialize(hostname, "P2PHANDSHAKE", "rdma",
    device)``; ``mooncake_tcp`` sets ``MC_FORCE_TCP=1`` first. Measured with
    mooncake-transfer-engine 0.3.13.post1 (non-CUDA build, Debian 12, no RDMA device): with
    protocol rdma and no device it logs "No RDMA devices found, check your device
    installation" and "Topology discovery complete. Found 0 HCAs.", installs its
    TcpTransport and returns 0, so the server starts and moves the KV over TCP; with
    ``MC_FORCE_HCA=1`` it logs "RdmaTransport: No available RNIC" and "Failed to install
    transport, type=rdma", returns -1, and the release raises ``RuntimeError("Mooncake
    Transfer Engine initialization failed.")``. NIXL (``disaggregation/nixl/conn.py``):
    ``from nixl._api import ...`` (ImportError "Please install NIXL ...").

    The emulator needs no transfer engine: it imports the real module only with env
    ``SGLANG_EMULATOR_REQUIRE_TRANSFER_ENGINE=1`` (and dies as the release does when that
    fails); it reads the RDMA devices from ``/sys/class/infiniband``.
    """
    mode = mode_of(args)
    if mode == "null":
        return None
    backend = args.get("disaggregation_transfer_backend") or "mooncake"
    require = os.environ.get(REQUIRE_ENGINE_ENV, "") not in ("", "0")
    if backend in ("mooncake", "mooncake_tcp"):
        if require:
            try:
                __import__("mooncake.engine")
            except ImportError:
                return ImportError(MOONCAKE_IMPORT_ERROR)
        force_tcp = backend == "mooncake_tcp" or os.environ.get("MC_FORCE_TCP") == "1"
        if backend == "mooncake_tcp" and version_tuple(release) >= (0, 5, 23):
            log("disaggregation transfer backend 'mooncake_tcp' -> mooncake with MC_FORCE_TCP=1 "
                "(TCP transport, no RDMA)")
        devices = rdma_devices() or []
        if not force_tcp:
            _glog("I", "transfer_engine_impl.cpp:259", "Auto-discovering topology...")
            if not devices:
                _glog("W", "topology.cpp:201",
                      "No RDMA devices found, check your device installation")
            _glog("I", "transfer_engine_impl.cpp:274",
                  "Topology discovery complete. Found %d HCAs." % len(devices))
            if not devices and os.environ.get("MC_FORCE_HCA", "") not in ("", "0", "false"):
                _glog("E", "rdma_transport.cpp:1139", "RdmaTransport: No available RNIC")
                _glog("E", "rdma_transport.cpp:208",
                      "RdmaTransport: cannot initialize RDMA resources")
                _glog("E", "transfer_engine_impl.cpp:426", "Failed to install transport, type=rdma")
                log("Mooncake Transfer Engine initialization failed.", prefix)
                return RuntimeError("Mooncake Transfer Engine initialization failed.")
        if force_tcp or not devices:
            _glog("I", "tcp_transport.cpp:391", "TcpTransport: listen on port %d" % _free_port())
        return None
    if backend == "nixl" and require:
        try:
            __import__("nixl._api")
        except ImportError:
            return ImportError(NIXL_IMPORT_ERROR)
    return None


def _free_port():
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


# ------------------------------------------------------------------ schedulers

class PrefillScheduler(_engine.Scheduler):
    """A prefill server's scheduler: the requests come with ``max_new_tokens`` 1, so a
    request leaves the running batch at the end of its last prefill forward (its first
    token sampled), but its KV stays taken (*inflight*) until :meth:`release`, when the
    transfer is done (``process_disagg_prefill_inflight_queue``)."""

    def __init__(self, model):
        super().__init__(model)
        self.inflight = []

    def _fits(self, req):
        model = self.model
        if model.max_running_requests is not None and len(self.running) >= model.max_running_requests:
            return False
        if (model.kv_tokens is not None and (self.running or self.inflight)
                and self.kv_used + req.reserved > model.kv_tokens):
            return False
        return True

    def apply(self, fwd):
        before = list(self.running)
        emitted = super().apply(fwd)
        for req in before:
            if req not in self.running and not getattr(req, "aborted", False):
                self.kv_used += req.reserved  # still held: the KV is being sent
                self.inflight.append(req)
        self.peak_kv_used = max(self.peak_kv_used, self.kv_used)
        return emitted

    def release(self, req):
        if req in self.inflight:
            self.inflight.remove(req)
            self.kv_used -= req.reserved

    def idle(self):
        return super().idle() and not self.inflight


class DecodeScheduler(_engine.Scheduler):
    """A decode server's scheduler: :meth:`submit` puts a request in the *prealloc queue*;
    :meth:`plan` first admits what the KV pool and ``--max-running-requests`` allow (its
    prompt and all its output reserved, as the running requests; ``on_admit`` is told),
    then lets the requests whose KV has come (:meth:`arrive`) join the running batch in a
    forward of no cost that gives them their first token (the prefill's), then decodes."""

    def __init__(self, model, on_admit=None):
        super().__init__(model)
        self.prealloc = collections.deque()
        self.transferring = []
        self.arrived = []
        self.on_admit = on_admit

    def submit(self, req):
        self.prealloc.append(req)

    def idle(self):
        return super().idle() and not (self.prealloc or self.transferring or self.arrived)

    def held(self):
        return len(self.running) + len(self.transferring) + len(self.arrived)

    def admit(self):
        model = self.model
        admitted = []
        while self.prealloc:
            req = self.prealloc[0]
            held = self.held()
            if model.max_running_requests is not None and held >= model.max_running_requests:
                break
            if model.kv_tokens is not None and held and self.kv_used + req.reserved > model.kv_tokens:
                break
            self.prealloc.popleft()
            self.transferring.append(req)
            self.kv_used += req.reserved
            self.peak_kv_used = max(self.peak_kv_used, self.kv_used)
            admitted.append(req)
        return admitted

    def arrive(self, req):
        if req in self.transferring:
            self.transferring.remove(req)
            self.arrived.append(req)

    def drop(self, req):
        """A request that failed before it joined the batch: its KV goes back."""
        if req in self.prealloc:
            self.prealloc.remove(req)
            return
        for group in (self.transferring, self.arrived):
            if req in group:
                group.remove(req)
                self.kv_used -= req.reserved

    def plan(self):
        admitted = self.admit()
        if admitted and self.on_admit is not None:
            self.on_admit(admitted)
        if self.arrived:
            joined, self.arrived = self.arrived, []
            decoding = [r for r in self.running if r.prefilled >= r.prompt and r.out < r.n_out]
            for req in joined:
                req.prefilled = req.prompt
                self.running.append(req)
            self.peak_running = max(self.peak_running, len(self.running))
            fwd = _engine.Forward("prebuilt", [], joined, 0.0)
            if "report" in getattr(_engine.Forward, "__slots__", ()):
                fwd.report = (len(decoding), len(self.prealloc))
            return fwd
        return super().plan()


# ------------------------------------------------------------------ engines (real time)

def _engine_kwargs(metrics):
    return {"metrics": metrics} if metrics is not None else {}


class PrefillEngine(_engine.Engine):
    """The prefill server's :class:`engine.Engine` with a :class:`PrefillScheduler`."""

    def __init__(self, model, metrics=None):
        super().__init__(model.single, model.ceiling, model.ttft_s, model=model,
                         **_engine_kwargs(metrics))
        self._sched = PrefillScheduler(self.model)

    @property
    def in_flight(self):
        return len(self._sched.running) + len(self._sched.waiting) + len(self._sched.inflight)

    @property
    def inflight(self):
        return len(self._sched.inflight)

    def submit(self, n_prompt):
        """Queue a bootstrapped request for its prefill; returns the Req (its ``sink`` gets
        the first token's index when the prefill is done)."""
        with self._lock:
            self._next_rid += 1
            req = _engine.Req(self._next_rid, n_prompt, 1, queue.SimpleQueue())
            self._sched.submit(req)
            self._start()
            self._lock.notify_all()
        return req

    def count(self, n_prompt):
        with self._lock:
            self.requests_total += 1
            self.prompt_tokens_total += n_prompt

    def release(self, req):
        with self._lock:
            self._sched.release(req)
            self._lock.notify_all()

    def abort_all(self):
        with self._lock:
            inflight = list(self._sched.inflight)
            for req in inflight:
                self._sched.release(req)
                req.aborted = True
        if hasattr(_engine.Engine, "abort_all"):
            return super().abort_all()  # pylint: disable=no-member
        return 0, 0


class DecodeEngine(_engine.Engine):
    """The decode server's :class:`engine.Engine` with a :class:`DecodeScheduler`."""

    def __init__(self, model, metrics=None):
        super().__init__(model.single, model.ceiling, model.ttft_s, model=model,
                         **_engine_kwargs(metrics))
        self._admitted = {}  # Req -> threading.Event, set when its KV is reserved
        self._sched = DecodeScheduler(self.model, on_admit=self._on_admit)

    def _on_admit(self, reqs):
        for req in reqs:
            event = self._admitted.pop(req, None)
            if event is not None:
                event.set()

    @property
    def in_flight(self):
        s = self._sched
        return len(s.running) + len(s.waiting) + len(s.prealloc) + len(s.transferring) + len(s.arrived)

    def queues(self):
        with self._lock:
            return len(self._sched.prealloc), len(self._sched.transferring)

    def new_request(self, n_prompt, n_tokens):
        with self._lock:
            self._next_rid += 1
            self.requests_total += 1
            self.prompt_tokens_total += n_prompt
            return _engine.Req(self._next_rid, n_prompt, n_tokens, queue.SimpleQueue())

    def prealloc(self, req):
        """Queue ``req`` for its KV; returns an Event set once the KV is reserved."""
        event = threading.Event()
        with self._lock:
            self._admitted[req] = event
            self._sched.submit(req)
            self._start()
            self._lock.notify_all()
        return event

    def arrive(self, req):
        with self._lock:
            self._sched.arrive(req)
            self._lock.notify_all()

    def drop(self, req):
        with self._lock:
            self._admitted.pop(req, None)
            self._sched.drop(req)
            self._lock.notify_all()

    def abort_all(self):
        with self._lock:
            s = self._sched
            pending = list(s.prealloc) + list(s.transferring) + list(s.arrived)
            for req in pending:
                s.drop(req)
                req.aborted = True
                event = self._admitted.pop(req, None)
                if event is not None:
                    event.set()
        abort = getattr(_engine, "_ABORT", None)
        for req in pending:
            if abort is not None:
                req.sink.put(abort)
        running, queued = 0, 0
        if hasattr(_engine.Engine, "abort_all"):
            running, queued = super().abort_all()  # pylint: disable=no-member
        return running, queued + len(pending)


def _with_prompt(tokens, n_prompt):
    try:
        yield from tokens
    except Abort as exc:
        exc.prompt_tokens = n_prompt
        raise


def _tokens(req, n_tokens):
    """The indices a request's sink gets, as ``Engine.generate`` yields them."""
    abort = getattr(_engine, "_ABORT", None)
    for n in range(n_tokens):
        index = req.sink.get()
        if abort is not None and index is abort:
            raise _engine.Aborted("request %d dropped after %d of %d tokens" % (req.rid, n, n_tokens))
        yield index


# ------------------------------------------------------------------ metrics

class _Hist:
    def __init__(self, buckets):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.total = 0.0
        self.count = 0
        self.last = 0.0

    def observe(self, value):
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.counts[-1] += 1
        self.total += value
        self.count += 1
        self.last = value


def metric_specs(release):
    """``[(name, kind, help, key)]`` of the release's PD series (key: the emulator's
    value); kind ``histogram`` in 0.5.23, last-value gauges before."""
    v = version_tuple(release)
    if v < (0, 5):
        return []
    if v >= (0, 5, 23):
        return [
            ("sglang:num_prefill_bootstrap_queue_reqs", "gauge",
             "The number of requests in the prefill bootstrap queue.", "prefill_bootstrap"),
            ("sglang:num_prefill_inflight_queue_reqs", "gauge",
             "The number of requests in the prefill inflight queue.", "prefill_inflight"),
            ("sglang:num_decode_prealloc_queue_reqs", "gauge",
             "The number of requests in the decode prealloc queue.", "decode_prealloc"),
            ("sglang:num_decode_transfer_queue_reqs", "gauge",
             "The number of requests in the decode transfer queue.", "decode_transfer"),
            ("sglang:kv_transfer_speed_gb_s", "histogram",
             "Histogram of KV cache transfer speed in GB/s.", "speed"),
            ("sglang:kv_transfer_latency_ms", "histogram",
             "Histogram of KV cache transfer latency in ms.", "latency"),
            ("sglang:num_bootstrap_failed_reqs_total", "counter",
             "The number of bootstrap failed requests.", "bootstrap_failed"),
            ("sglang:num_transfer_failed_reqs_total", "counter",
             "The number of transfer failed requests.", "transfer_failed"),
            ("sglang:kv_transfer_bootstrap_ms", "histogram",
             "Histogram of KV transfer bootstrap time in ms.", "bootstrap"),
            ("sglang:kv_transfer_alloc_ms", "histogram",
             "Histogram of KV transfer allocation waiting time in ms.", "alloc"),
            ("sglang:kv_transfer_total_mb", "histogram",
             "Histogram of KV cache transfer size in MB.", "size"),
        ]
    specs = [
        ("sglang:num_prefill_prealloc_queue_reqs", "gauge",
         "The number of requests in the prefill prealloc queue.", "prefill_bootstrap"),
        ("sglang:num_prefill_inflight_queue_reqs", "gauge",
         "The number of requests in the prefill inflight queue.", "prefill_inflight"),
        ("sglang:num_decode_prealloc_queue_reqs", "gauge",
         "The number of requests in the decode prealloc queue.", "decode_prealloc"),
        ("sglang:num_decode_transfer_queue_reqs", "gauge",
         "The number of requests in the decode transfer queue.", "decode_transfer"),
        ("sglang:num_bootstrap_failed_reqs_total", "counter",
         "The number of bootstrap failed requests.", "bootstrap_failed"),
        ("sglang:num_transfer_failed_reqs_total", "counter",
         "The number of transfer failed requests.", "transfer_failed"),
        ("sglang:kv_transfer_speed_gb_s", "gauge",
         "The transfer speed of the KV cache in GB/s.", "speed"),
        ("sglang:kv_transfer_latency_ms", "gauge",
         "The transfer latency of the KV cache in ms.", "latency"),
        ("sglang:kv_transfer_bootstrap_ms", "gauge",
         "The bootstrap time of the KV transfer in ms.", "bootstrap"),
        ("sglang:kv_transfer_alloc_ms", "gauge",
         "The allocation waiting time of the KV transfer in ms.", "alloc"),
    ]
    if v >= (0, 5, 9):
        specs.append(("sglang:kv_transfer_total_mb", "gauge",
                      "The total number of tokens transferred in the KV cache.", "size"))
    return specs


METRICS = {release: metric_specs(release) for release in ("0.5.4.post3", "0.5.9", "0.5.23")}
# The series each role sets (the release registers them all; a series whose gauge or
# histogram a role never sets shows no sample there): the prefill's queues and transfers
# (prefill.py l.1255, req_time_stats.py l.954-1000), the decode's queues and its bootstrap
# and allocation times (req_time_stats.py l.1064-1080), the failure counters on both.
ROLE_SERIES = {
    "prefill": ("prefill_bootstrap", "prefill_inflight", "speed", "latency", "size",
                "bootstrap_failed", "transfer_failed"),
    "decode": ("decode_prealloc", "decode_transfer", "bootstrap", "alloc",
               "bootstrap_failed", "transfer_failed"),
}


# ------------------------------------------------------------------ the PD service

class _Room:
    """One bootstrap room on the prefill server: the request and the decode's indices."""

    def __init__(self, room):
        self.room = room
        self.created = time.monotonic()
        self.request = False      # the prefill's request came
        self.meta = None          # the decode's indices: {"bytes", "decode"}
        self.prefilled = False    # the prefill's forward is done: send
        self.gone = False         # the prefill's request failed or left
        self.sent = None          # None: not yet; True: done; str: the failure
        self.transfer = None      # (seconds, bytes)


class PDService:
    """The PD side of one emulated server (``--disaggregation-mode prefill|decode``)."""

    def __init__(self, release, args, layout, mem, prefix="TP0"):
        self.release = release
        self.version = version_tuple(release)
        self.args = args
        self.layout = layout
        self.mem = mem
        self.prefix = prefix
        self.mode = mode_of(args)
        raw = args.get("disaggregation_transfer_backend") or "mooncake"
        self.backend_arg = raw
        self.backend = "mooncake" if raw == "mooncake_tcp" else raw
        self.scale = kv_scale()
        self.wire_bytes_per_token = wire_bytes_per_token(mem, layout)
        self.host = args.get("host") or "127.0.0.1"
        self.port = int(args.get("port") or 30000)
        self.bootstrap_port = int(args.get("disaggregation_bootstrap_port") or DEFAULT_BOOTSTRAP_PORT)
        self.engine = None
        self.lock = threading.Condition()
        self.counters = {"bootstrap_failed": 0, "transfer_failed": 0}
        self.hists = {"speed": _Hist(SPEED_BUCKETS), "latency": _Hist(LATENCY_BUCKETS),
                      "size": _Hist(SIZE_BUCKETS), "bootstrap": _Hist(BOOTSTRAP_BUCKETS),
                      "alloc": _Hist(BOOTSTRAP_BUCKETS)}
        self._warned = set()
        # prefill
        self.rooms = {}
        self.registered = {}      # (dp, cp, tp, pp) -> {"rank_ip", "rank_port"}
        self.rank_port = None
        self.rank_ip = None
        self._bootstrap_httpd = None
        self._rank_sock = None
        # decode
        self.prefill_info = {}    # bootstrap addr -> (info, rank (ip, port))
        self.addr_rooms = collections.defaultdict(set)   # addr -> {_Transfer}
        self.heartbeat_failures = {}
        self._heartbeat = None

    # ---- helpers
    def _warn_once(self, text):
        if text not in self._warned:
            self._warned.add(text)
            log(text, self.prefix)

    def _new_rid(self):
        return uuid.uuid4().hex

    def describe(self):
        return {"mode": self.mode, "transfer_backend": self.backend_arg,
                "transport": "plain TCP socket (emulator)", "kv_transfer_scale": self.scale,
                "wire_bytes_per_token": self.wire_bytes_per_token,
                "bootstrap_port": self.bootstrap_port if self.mode == "prefill" else None,
                "rank_port": self.rank_port,
                "bootstrap_timeout_s": bootstrap_timeout(), "waiting_timeout_s": waiting_timeout()}

    # ---- prefill: bootstrap server and the rank's listener
    def start_bootstrap_server(self):
        """The bootstrap server, started while the weights load (the release's tokenizer
        manager starts it); a bind failure is logged and the server goes on, as the
        release's thread does (``_run_server``: "Server error: ...")."""
        service = self
        handler = type("BootstrapHandler", (_BootstrapHandler,), {"service": service})
        cls = type("BootstrapServer", (ThreadingHTTPServer,),
                   {"daemon_threads": True, "allow_reuse_address": True,
                    "address_family": socket.AF_INET6 if ":" in self.host else socket.AF_INET})
        try:
            self._bootstrap_httpd = cls((self.host, self.bootstrap_port), handler)
        except OSError as exc:
            log("Server error: [Errno %s] error while attempting to bind on address (%r, %d): %s"
                % (exc.errno, self.host, self.bootstrap_port, (exc.strerror or str(exc)).lower()))
            return
        threading.Thread(target=self._bootstrap_httpd.serve_forever, daemon=True,
                         name="bootstrap-server").start()
        log("CommonKVBootstrapServer started successfully on %s:%d" % (self.host, self.bootstrap_port))

    def _local_ip(self):
        """The ``rank_ip`` the release registers (``get_local_ip_auto``): ``SGLANG_HOST_IP``,
        else the host's outgoing address; ``--host`` when it names one address."""
        if self.host not in ("0.0.0.0", "::", ""):
            return self.host
        env = os.environ.get("SGLANG_HOST_IP")
        if env:
            return env
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.connect(("10.255.255.255", 1))
                return sock.getsockname()[0]
        except OSError:
            return "127.0.0.1"

    def register_ranks(self):
        """Open the rank's KV socket and register every attention rank on it (the KV
        manager's ``register_to_bootstrap``, after the KV pool is set up)."""
        self.rank_ip = self._local_ip()
        family = socket.AF_INET6 if ":" in self.rank_ip else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("" if family == socket.AF_INET else "::", 0))
        sock.listen(1024)
        self._rank_sock = sock
        self.rank_port = sock.getsockname()[1]
        threading.Thread(target=self._accept_loop, daemon=True, name="kv-rank").start()
        tp = int(self.layout.get("tp_size") or 1)
        dp = int(self.layout.get("attn_dp_size") or 1) if self.layout.get("enable_dp_attention") else 1
        pp = int(self.layout.get("pp_size") or 1)
        with self.lock:
            for d in range(dp):
                for t in range(max(tp // dp, 1)):
                    for p in range(pp):
                        self.registered[(d, 0, t, p)] = {"rank_ip": self.rank_ip,
                                                         "rank_port": self.rank_port}

    def parallel_info(self):
        """``PrefillServerInfo`` (0.5.23) or the 0.5.9 dict, or None before registration."""
        tp = int(self.layout.get("tp_size") or 1)
        dp_att = self.layout.get("enable_dp_attention")
        dp = int(self.layout.get("attn_dp_size") or 1) if dp_att else int(self.layout.get("dp_size") or 1)
        attn_tp = max(tp // dp, 1) if dp_att else tp
        pp = int(self.layout.get("pp_size") or 1)
        page = int(self.args.get("page_size") or 1)
        if self.version >= (0, 5, 23):
            if len(self.registered) < (dp if dp_att else 1) * attn_tp * pp:
                return None
            return {"attn_tp_size": attn_tp, "attn_cp_size": 1, "dp_size": dp, "pp_size": pp,
                    "page_size": page, "kv_cache_dtype": self.args.get("kv_cache_dtype") or "auto",
                    "follow_bootstrap_room": True, "enable_dsa_cache_layer_split": False,
                    "decode_allocation_policy": "early", "enable_kv_cache_sharding": False,
                    "prefill_http_port": self.port}
        ready = bool(self.registered)
        return {"prefill_attn_tp_size": attn_tp if ready else None,
                "prefill_dp_size": dp if ready else None,
                "prefill_pp_size": pp if ready else None,
                "prefill_page_size": page if ready else None}

    def _accept_loop(self):
        while True:
            try:
                conn, addr = self._rank_sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve_decode, args=(conn, addr), daemon=True).start()

    def _room(self, room):
        entry = self.rooms.get(room)
        if entry is None:
            entry = self.rooms[room] = _Room(room)
        return entry

    def _forget(self, entry):
        if self.rooms.get(entry.room) is entry:
            del self.rooms[entry.room]

    def _serve_decode(self, conn, addr):
        """One decode rank's indices for one room, then the KV bytes back."""
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            line = _readline(conn, time.monotonic() + 30.0)
            meta = json.loads(line.decode("utf-8"))
            room, nbytes = int(meta["room"]), int(meta["bytes"])
        except (OSError, ValueError, KeyError, TypeError):
            conn.close()
            return
        limit = time.monotonic() + max(bootstrap_timeout(), waiting_timeout()) + 5.0
        with self.lock:
            entry = self._room(room)
            entry.meta = {"bytes": nbytes, "decode": meta.get("decode") or "%s:%s" % addr[:2]}
            self.lock.notify_all()
            while not entry.prefilled and not entry.gone:
                if time.monotonic() > limit or _peer_closed(conn):
                    # the decode gave up (its waiting timeout) or went away
                    entry.sent = "Failed to send kv chunk of %s to %s" % (room, entry.meta["decode"])
                    self._forget(entry)
                    self.lock.notify_all()
                    conn.close()
                    return
                self.lock.wait(0.5)
            gone = not entry.prefilled
        if gone:
            # the prefill's request failed (bootstrap timeout, dropped): tell the decode
            try:
                conn.sendall((json.dumps({"room": room, "failed": None}) + "\n").encode())
            except OSError:
                pass
            conn.close()
            return
        started = time.monotonic()
        failure = None
        try:
            conn.sendall((json.dumps({"room": room, "bytes": nbytes}) + "\n").encode())
            _send_zeros(conn, nbytes)
            ack = conn.recv(1)
            if ack != b"K":
                raise OSError("no ack")
        except OSError:
            failure = "Failed to send kv chunk of %s to %s" % (room, entry.meta["decode"])
        elapsed = time.monotonic() - started
        conn.close()
        with self.lock:
            entry.sent = failure or True
            entry.transfer = (elapsed, nbytes)
            self.lock.notify_all()

    def _prefill_generate(self, n_prompt, room, fake):
        eng = self.engine
        eng.count(n_prompt)
        rid = self._new_rid()
        if fake:
            req = eng.submit(n_prompt)
            yield from _tokens(req, 1)
            eng.release(req)
            return
        deadline = time.monotonic() + bootstrap_timeout()
        with self.lock:
            entry = self._room(room)
            entry.request = True
            while entry.meta is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.lock.wait(min(left, 1.0))
            bootstrapped = entry.meta is not None
            if not bootstrapped:
                entry.gone = True
                self._forget(entry)
        if not bootstrapped:
            elapsed = time.monotonic() - (deadline - bootstrap_timeout())
            self._warn_once(BOOTSTRAP_TIMEOUT_WARNING)
            exc = KVTransferError(room, "Request %s timed out after %.1fs in KVPoll.Bootstrapping"
                                  % (room, elapsed))
            message = ("Prefill bootstrap failed for request rank=0 req.rid=%r "
                       "req.bootstrap_room=%s with exception %s" % (rid, room, exc))
            log(message, self.prefix)
            with self.lock:
                self.counters["bootstrap_failed"] += 1
            raise Abort(500, message)
        req = eng.submit(n_prompt)
        try:
            tokens = list(_tokens(req, 1))
        except _engine.Aborted:
            with self.lock:
                entry.gone = True
                self.lock.notify_all()
            raise
        with self.lock:
            entry.prefilled = True
            self.lock.notify_all()
            while entry.sent is None:
                self.lock.wait(1.0)
            sent, transfer = entry.sent, entry.transfer
            self._forget(entry)
        eng.release(req)
        if sent is not True:
            exc = KVTransferError(room, sent)
            message = ("Prefill transfer failed for request rank=0 req.rid=%r "
                       "req.bootstrap_room=%s with exception %s" % (rid, room, exc))
            log(message, self.prefix)
            with self.lock:
                self.counters["transfer_failed"] += 1
            raise Abort(500, message)
        seconds, nbytes = transfer
        real_mb = nbytes * self.scale / (1024.0 * 1024.0)
        with self.lock:
            if seconds > 0:
                self.hists["latency"].observe(seconds * 1000.0)
                self.hists["size"].observe(real_mb)
                self.hists["speed"].observe(real_mb / 1024.0 / seconds)
        yield from tokens

    # ---- decode
    def _ensure_prefill(self, addr):
        """The prefill's parallel info and rank 0's address, cached per bootstrap address;
        None after 15 failed tries (then the release aborts the request)."""
        with self.lock:
            cached = self.prefill_info.get(addr)
        if cached is not None:
            return cached
        if self.version >= (0, 5, 23):
            probe = "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"
            rank = "/route?prefill_dp_rank=0&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0"
        else:
            probe = "/route?engine_rank=-1&target_dp_group=-1&target_pp_rank=-1"
            rank = "/route?engine_rank=0&target_dp_group=0&target_pp_rank=0"
        for attempt in range(ENSURE_RETRIES):
            if attempt:
                time.sleep(ENSURE_RETRY_INTERVAL_S)
            try:
                status, body = _http_get(addr, probe, timeout=5)
                if status != 200:
                    log("Failed to get prefill server info: %d, %s" % (status, body.decode("utf-8", "replace")),
                        self.prefix)
                    continue
                info = json.loads(body)
                status, body = _http_get(addr, rank, timeout=5)
                if status != 200:
                    continue
                target = json.loads(body)
            except (OSError, ValueError) as exc:
                log("Error fetching prefill server info from bootstrap: %s" % exc, self.prefix)
                continue
            result = (info, (target["rank_ip"], int(target["rank_port"])))
            with self.lock:
                self.prefill_info[addr] = result
                self.heartbeat_failures[addr] = 0
            self._start_heartbeat()
            return result
        log("Could not fetch prefill parallel info from %s after %d attempts"
            % (addr, ENSURE_RETRIES), self.prefix)
        return None

    def _start_heartbeat(self):
        with self.lock:
            if self._heartbeat is not None:
                return
            self._heartbeat = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                               name="HeartbeatChecker")
        self._heartbeat.start()

    def _heartbeat_loop(self):
        """``_start_heartbeat_checker_thread`` (common/conn.py l.1998-2055)."""
        interval = max(env_number("SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL", 5.0), 2.0)
        max_failures = max(env_number("SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE", 2, int), 1)
        while True:
            time.sleep(interval)
            with self.lock:
                addrs = list(self.prefill_info)
            for addr in addrs:
                try:
                    ok = _http_get(addr, "/health", timeout=3)[0] == 200
                except OSError:
                    ok = False
                with self.lock:
                    if ok:
                        self.heartbeat_failures[addr] = 0
                        continue
                    log("Attempting to reconnect to %s..." % addr, self.prefix)
                    self.heartbeat_failures[addr] = self.heartbeat_failures.get(addr, 0) + 1
                    if self.heartbeat_failures[addr] < max_failures:
                        continue
                    self.prefill_info.pop(addr, None)
                    self.heartbeat_failures.pop(addr, None)
                    affected = [t for t in self.addr_rooms.pop(addr, set()) if t.result is None]
                reason = "Lost connection with prefill instance (bootstrap_addr: %s)" % addr
                for transfer in affected:
                    transfer.fail(reason)
                log("%s, %d requests affected" % (reason, len(affected)), self.prefix)

    def _decode_generate(self, n_tokens, n_prompt, host, port, room, fake):
        eng = self.engine
        rid = self._new_rid()
        req = eng.new_request(n_prompt, n_tokens)
        entered = time.monotonic()
        if fake:
            eng.prealloc(req).wait()
            eng.arrive(req)
            yield from _tokens(req, n_tokens)
            return
        addr = "%s:%s" % (host, port)
        transfer = _Transfer(self, req, addr, room, rid)
        with self.lock:
            self.addr_rooms[addr].add(transfer)
        try:
            target = self._ensure_prefill(addr)
            if target is None:
                exc = KVTransferError(room, "Aborted by AbortReq.")
                message = ("Decode handshake failed for request rank=0 decode_req.req.rid=%r "
                           "decode_req.req.bootstrap_room=%s with exception %s" % (rid, room, exc))
                log(message, self.prefix)
                with self.lock:
                    self.counters["bootstrap_failed"] += 1
                eng.drop(req)
                raise Abort(500, message)
            bootstrapped = time.monotonic()
            admitted = eng.prealloc(req)
            admitted.wait()
            if getattr(req, "aborted", False):
                raise _engine.Aborted("request %d dropped before its KV came" % req.rid)
            allocated = time.monotonic()
            with self.lock:
                self.hists["bootstrap"].observe((bootstrapped - entered) * 1000.0)
                self.hists["alloc"].observe((allocated - bootstrapped) * 1000.0)
            nbytes = int(-(-n_prompt * self.wire_bytes_per_token // self.scale))
            reason = transfer.receive(target[1], nbytes)
            if reason is not None:
                exc = KVTransferError(room, reason)
                message = ("Decode transfer failed for request rank=0 decode_req.req.rid=%r "
                           "decode_req.req.bootstrap_room=%s with exception %s" % (rid, room, exc))
                log(message, self.prefix)
                with self.lock:
                    self.counters["transfer_failed"] += 1
                eng.drop(req)
                raise Abort(500, message)
        finally:
            with self.lock:
                self.addr_rooms.get(addr, set()).discard(transfer)
        eng.arrive(req)
        yield from _tokens(req, n_tokens)

    # ---- the HTTP server's hook
    def generate(self, n_tokens, n_prompt, body, index=0):
        """The token indices of one request on this PD server (an iterator); raises
        :class:`Abort` where the release aborts it."""
        body = body or {}

        def pick(key):
            val = body.get(key)
            if isinstance(val, list):
                return val[index] if index < len(val) else None
            return val

        host, port, room = pick("bootstrap_host"), pick("bootstrap_port"), pick("bootstrap_room")
        fake = host == FAKE_BOOTSTRAP_HOST or (host is None and self.backend == "fake")
        if self.backend == "fake":
            fake = True
        if room is None and not fake:
            message = ("Invalid request: Disaggregated request received without bootstrap room "
                       "id. req.rid=%r" % self._new_rid())
            log(message, self.prefix)
            exc = Abort(400, message)
            exc.prompt_tokens = n_prompt
            raise exc
        if port is None:
            port = DEFAULT_BOOTSTRAP_PORT
        if self.mode == "prefill":
            return _with_prompt(self._prefill_generate(n_prompt, room, fake), n_prompt)
        return _with_prompt(self._decode_generate(n_tokens, n_prompt, host, port, room, fake),
                            n_prompt)

    # ---- /metrics
    def values(self):
        with self.lock:
            bootstrap = sum(1 for r in self.rooms.values()
                            if r.request and r.meta is None and not r.gone)
            counters = dict(self.counters)
            hists = {k: (h.buckets, list(h.counts), h.total, h.count, h.last)
                     for k, h in self.hists.items()}
        out = {"prefill_bootstrap": bootstrap, "prefill_inflight": 0, "decode_prealloc": 0,
               "decode_transfer": 0}
        if isinstance(self.engine, PrefillEngine):
            out["prefill_inflight"] = self.engine.inflight
        elif isinstance(self.engine, DecodeEngine):
            out["decode_prealloc"], out["decode_transfer"] = self.engine.queues()
        out.update(counters)
        out.update(hists)
        return out

    def metric_lines(self, labels, fmt_labels, fmt_float):
        """The release's PD series, with the scheduler's ``labels``."""
        vals = self.values()
        lines = []
        own = ROLE_SERIES[self.mode]
        for name, kind, help_text, key in metric_specs(self.release):
            if key not in own:
                continue
            lines.append("# HELP %s %s" % (name, help_text))
            lines.append("# TYPE %s %s" % (name, kind))
            val = vals[key]
            if kind == "histogram":
                buckets, counts, total, count, _last = val
                for bound, n in zip(list(buckets) + ["+Inf"], counts):
                    le = bound if bound == "+Inf" else fmt_float(bound)
                    lines.append("%s_bucket{%s} %s" % (name, fmt_labels(dict(labels, le=le)),
                                                       fmt_float(n)))
                lines.append("%s_count{%s} %s" % (name, fmt_labels(labels), fmt_float(count)))
                lines.append("%s_sum{%s} %s" % (name, fmt_labels(labels), fmt_float(total)))
                continue
            if isinstance(val, tuple):
                val = val[4]  # a last-value gauge (before 0.5.23)
            lines.append("%s{%s} %s" % (name, fmt_labels(labels), fmt_float(val)))
        return lines


class _Transfer:
    """A decode request waiting for its KV (the transfer queue); ``fail`` ends the wait."""

    def __init__(self, service, req, addr, room, rid):
        self.service = service
        self.req = req
        self.addr = addr
        self.room = room
        self.rid = rid
        self.result = None
        self.sock = None
        self._failed = threading.Event()
        self._lock = threading.Lock()

    def fail(self, reason):
        with self._lock:
            if self.result is None:
                self.result = reason
            sock = self.sock
        self._failed.set()
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def receive(self, target, nbytes):
        """Send the indices, wait for the KV; None when it came, else the failure."""
        started = time.monotonic()
        deadline = started + waiting_timeout()
        reason = None
        try:
            sock = socket.create_connection(target, timeout=max(min(deadline - time.monotonic(), 30), 0.1))
            with self._lock:
                self.sock = sock
                if self.result is not None:
                    raise OSError("failed")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall((json.dumps({"room": self.room, "bytes": nbytes,
                                      "decode": "%s:%d" % sock.getsockname()[:2]}) + "\n").encode())
            header = json.loads(_readline(sock, deadline).decode("utf-8"))
            if "failed" in header:
                reason = header["failed"] or PREFILL_FAILED_REASON
            else:
                _recv_exact(sock, int(header["bytes"]), deadline)
                sock.sendall(b"K")
        except socket.timeout:
            reason = "timeout"
        except (OSError, ValueError):
            reason = "lost"
        finally:
            with self._lock:
                sock, self.sock = self.sock, None
            if sock is not None:
                sock.close()
        if reason == "lost":
            # the prefill went away: the release finds it by its heartbeat, or times out
            left = deadline - time.monotonic()
            if not self._failed.wait(max(left, 0.0)):
                reason = "timeout"
        with self._lock:
            if self.result is not None:
                return self.result
            if reason == "timeout":
                elapsed = time.monotonic() - started
                self.service._warn_once(WAITING_TIMEOUT_WARNING)  # pylint: disable=protected-access
                reason = "Request %s timed out after %.1fs in KVPoll.WaitingForInput" % (self.room, elapsed)
            self.result = reason if reason is not None else True
            return reason


class _BootstrapHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "Python/3.11 aiohttp/3.9.5"
    sys_version = ""
    service = None

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        if os.environ.get("SGLANG_EMULATOR_ACCESS_LOG"):
            super().log_message(format, *args)

    def _reply(self, status, body, ctype="text/plain; charset=utf-8"):
        data = body if isinstance(body, bytes) else body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _json(self, obj):
        self._reply(200, json.dumps(obj), "application/json; charset=utf-8")

    def do_GET(self):  # noqa: N802
        svc = self.service
        url = urlsplit(self.path)
        if url.path == "/health":
            return self._reply(200, "OK")
        if url.path != "/route":
            return self._reply(404, "404: Not Found")
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        new = svc.version >= (0, 5, 23)
        keys = (("prefill_dp_rank", "prefill_cp_rank", "target_tp_rank", "target_pp_rank") if new
                else ("engine_rank", "target_dp_group", "target_pp_rank"))
        if not all(q.get(k) for k in keys):
            return self._reply(400, "Missing inputs for bootstrap server.")
        try:
            ranks = [int(q[k]) for k in keys]
        except ValueError:
            return self._reply(400, "Missing inputs for bootstrap server.")
        with svc.lock:
            info = svc.parallel_info()
            count = len(svc.registered)
        if all(r == -1 for r in ranks):
            if info is None:
                return self._reply(503, "Prefill server not fully registered yet (%d workers "
                                        "registered)." % count)
            return self._json(info)
        if new and info is None:
            return self._reply(503, "Prefill server not fully registered yet (%d workers "
                                    "registered)." % count)
        key = tuple(ranks) if new else (ranks[1], 0, ranks[0], ranks[2])
        with svc.lock:
            found = svc.registered.get(key)
        if found is None:
            if new:
                return self._reply(404, "Bootstrap info not found for dp_rank=%s cp_rank=%s "
                                        "tp_rank=%s pp_rank=%s" % tuple(q[k] for k in keys))
            return self._reply(404, "Bootstrap info not Found")
        return self._json(found)

    do_HEAD = do_GET

    def do_PUT(self):  # noqa: N802
        svc = self.service
        if urlsplit(self.path).path != "/route":
            return self._reply(405, "Method not allowed")
        length = int(self.headers.get("Content-Length") or 0)
        try:
            data = json.loads(self.rfile.read(length) or b"{}")
            key = (int(data.get("attn_dp_rank", data.get("system_dp_rank", 0)) or 0),
                   int(data.get("attn_cp_rank", 0) or 0), int(data.get("attn_tp_rank", 0) or 0),
                   int(data.get("pp_rank", 0) or 0))
            entry = {"rank_ip": data["rank_ip"], "rank_port": int(data["rank_port"])}
        except (ValueError, KeyError, TypeError):
            return self._reply(400, "Bad registration")
        with svc.lock:
            svc.registered[key] = entry
        return self._reply(200, "OK")


# ------------------------------------------------------------------ sockets

def _readline(sock, deadline):
    data = bytearray()
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out")
        sock.settimeout(left)
        chunk = sock.recv(1)
        if not chunk:
            raise OSError("closed")
        data += chunk
        if len(data) > 65536:
            raise ValueError("line too long")
    return bytes(data)


_ZEROS = bytes(CHUNK)


def _send_zeros(sock, nbytes):
    view = memoryview(_ZEROS)
    sock.settimeout(None)
    left = nbytes
    while left > 0:
        n = min(left, CHUNK)
        sock.sendall(view[:n])
        left -= n


def _recv_exact(sock, nbytes, deadline):
    buf = bytearray(min(CHUNK, max(nbytes, 1)))
    view = memoryview(buf)
    left = nbytes
    while left > 0:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("timed out")
        sock.settimeout(remaining)
        n = sock.recv_into(view[:min(left, len(buf))])
        if not n:
            raise OSError("closed")
        left -= n


def _peer_closed(sock):
    try:
        readable, _w, _x = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _http_get(addr, path, timeout=5):
    host, _sep, port = addr.rpartition(":")
    conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


# ------------------------------------------------------------------ hooks for main

_SERVICE = {}


def before_load(release, args, layout, mem, prefix):
    """At the scheduler's init, before the weights load: the transfer engine (the exception
    the release dies of, or None) and, on a prefill server's node 0, the bootstrap server."""
    if mode_of(args) == "null":
        return None
    warnings = []
    try:
        resolve(release, dict(args), warnings)  # what ServerArgs logs (it refused already)
    except (AssertionError, ValueError, RuntimeError):
        pass
    for text in warnings:
        log(text)
    failure = init_transfer_engine(release, args, prefix)
    if failure is not None:
        return failure
    if int(layout.get("node_rank") or 0) == 0:
        service = PDService(release, args, layout, mem, prefix)
        _SERVICE["service"] = service
        if service.mode == "prefill":
            service.start_bootstrap_server()
    return None


def wrap_engine(args, engine):
    """The PD server's engine in place of the co-located one (same model and reporter)."""
    mode = mode_of(args)
    if mode == "null":
        return engine
    cls = PrefillEngine if mode == "prefill" else DecodeEngine
    return cls(engine.model, getattr(engine, "metrics", None))


def attach(state):
    """Bind the PD service to the serving state; a prefill's ranks register now."""
    service = _SERVICE.get("service")
    if service is None or mode_of(state.args) == "null":
        return None
    service.engine = state.engine
    if service.mode == "prefill":
        service.register_ranks()
    state.pd = service
    return service


# ------------------------------------------------------------------ virtual clock

def _route_decode(in_flight):
    """The decode server the router picks: the one holding the fewest requests (the
    router's own count of what it sent there and has not seen finish), ties to the lowest
    index. A deterministic stand-in for smg's ``power_of_two`` (two workers sampled at
    random, the one with the lower load taken; its load falls back to the router's
    in-flight request count when the workers report no token load): with two decode
    servers both are always sampled, and only its tie-break is random."""
    return min(range(len(in_flight)), key=lambda j: (in_flight[j], j))


def simulate_pd(prefill_models, decode_models, wire_bytes, link_bytes_per_s, concurrency,
                num_prompts, input_len, output_len, client_rtt_s=None, link_latency_s=0.0):
    """N prefill and M decode servers behind one router under ``bench_serving
    --max-concurrency`` on a virtual clock: the ``bench_serving`` line (dict) of the whole,
    as ``bench.run`` gives for one server, plus the requests each server got.

    ``prefill_models`` and ``decode_models`` are :class:`engine.StepModel` (one per server;
    each server gets its own scheduler). At a request's arrival the router picks a prefill
    server round robin and the decode server holding the fewest requests
    (:func:`_route_decode`), and sends the request to both at once, as smg does. The
    decode admits it (its prealloc queue), then the prefill runs it; its KV, ``wire_bytes``
    per prompt token (real bytes: the scale of the HTTP servers does not enter here),
    leaves by its prefill server's egress link and comes in by its decode server's ingress
    link, each of ``link_bytes_per_s``. Each link is FIFO: a transfer starts once its
    prefill is done and both links are free of the transfers that were ready before it,
    and holds both for ``link_latency_s`` plus bytes / bandwidth. A request's first token
    comes from its decode server once its KV is there and the decode's loop takes it in.
    """
    from sglang._emulator import bench as _bench  # pylint: disable=import-outside-toplevel

    if not prefill_models or not decode_models:
        raise ValueError("simulate_pd needs at least one prefill and one decode model")
    if client_rtt_s is None:
        client_rtt_s = _bench.CLIENT_RTT_S
    concurrency = max(int(concurrency), 1)
    n_p, n_d = len(prefill_models), len(decode_models)
    heap = []
    seq = itertools.count()
    sent, tokens, pair, route = {}, {}, {}, {}
    busy_p, busy_d = [False] * n_p, [False] * n_d
    egress_free, ingress_free = [0.0] * n_p, [0.0] * n_d
    egress_busy, ingress_busy = [0.0] * n_p, [0.0] * n_d
    p_count, d_count, d_in_flight = [0] * n_p, [0] * n_d, [0] * n_d
    state = {"now": 0.0, "finished": 0, "xfer": [], "next_prefill": 0}
    rids = itertools.count(1)
    seconds = link_latency_s + input_len * wire_bytes / float(link_bytes_per_s)

    def push(at, kind, obj):
        heapq.heappush(heap, (at, next(seq), kind, obj))

    def on_admit(reqs):
        for dreq in reqs:
            push(state["now"], "meta", dreq)

    prefills = [PrefillScheduler(model) for model in prefill_models]
    decodes = [DecodeScheduler(model, on_admit=on_admit) for model in decode_models]

    def send(at):
        rid = next(rids)
        dreq = _engine.Req(rid, input_len, output_len)
        sent[rid] = at
        tokens[rid] = []
        push(at, "arrive", dreq)

    def record(j, emitted):
        done_here = 0
        for req, _index in emitted:
            tokens[req.rid].append(state["now"])
            if len(tokens[req.rid]) == req.n_out:
                state["finished"] += 1
                d_in_flight[j] -= 1
                done_here += 1
                if len(sent) < num_prompts:
                    send(state["now"] + done_here * client_rtt_s)

    def kick_prefill(i):
        if busy_p[i]:
            return
        fwd = prefills[i].plan()
        if fwd is not None:
            busy_p[i] = True
            push(state["now"] + fwd.duration, "p_end", (i, fwd))

    def kick_decode(j):
        while not busy_d[j]:
            fwd = decodes[j].plan()
            if fwd is None:
                return
            if fwd.duration <= 0:
                record(j, decodes[j].apply(fwd))
                continue
            busy_d[j] = True
            push(state["now"] + fwd.duration, "d_end", (j, fwd))

    for n in range(min(concurrency, num_prompts)):
        send(n * client_rtt_s)
    while heap and state["finished"] < num_prompts:
        at, _n, kind, obj = heapq.heappop(heap)
        state["now"] = at
        if kind == "arrive":
            i = state["next_prefill"]
            state["next_prefill"] = (i + 1) % n_p
            j = _route_decode(d_in_flight)
            route[obj.rid] = (i, j)
            p_count[i] += 1
            d_count[j] += 1
            d_in_flight[j] += 1
            decodes[j].submit(obj)
            kick_decode(j)
        elif kind == "meta":
            i = route[obj.rid][0]
            preq = _engine.Req(obj.rid, input_len, 1)
            pair[id(preq)] = (preq, obj)
            prefills[i].submit(preq)
            kick_prefill(i)
        elif kind == "p_end":
            i, fwd = obj
            busy_p[i] = False
            for preq, _index in prefills[i].apply(fwd):
                j = route[preq.rid][1]
                start = max(at, egress_free[i], ingress_free[j])
                end = start + seconds
                egress_free[i] = ingress_free[j] = end
                egress_busy[i] += seconds
                ingress_busy[j] += seconds
                state["xfer"].append(end - at)
                push(end, "x_end", preq)
            kick_prefill(i)
        elif kind == "x_end":
            preq, dreq = pair.pop(id(obj))
            i, j = route[dreq.rid]
            prefills[i].release(preq)
            decodes[j].arrive(dreq)
            kick_prefill(i)
            kick_decode(j)
        elif kind == "d_end":
            j, fwd = obj
            busy_d[j] = False
            record(j, decodes[j].apply(fwd))
            kick_decode(j)
    line = _bench._line(sent, tokens, concurrency, input_len, output_len)  # pylint: disable=protected-access
    xfer = state["xfer"]
    duration = line["duration"]

    def share(busy):
        return [b / duration if duration else 0.0 for b in busy]

    egress, ingress = share(egress_busy), share(ingress_busy)
    line.update({
        "emulator_pd": True,
        "emulator_pd_layout": "%dP%dD" % (n_p, n_d),
        "emulator_peak_running": max(d.peak_running for d in decodes),
        "emulator_peak_kv_tokens": max(d.peak_kv_used for d in decodes),
        "emulator_mean_transfer_ms": 1000.0 * sum(xfer) / len(xfer) if xfer else 0.0,
        # the busiest link (one link per server and direction)
        "emulator_link_utilization": max(egress + ingress),
        "emulator_egress_utilization": egress,
        "emulator_ingress_utilization": ingress,
        "emulator_prefill_requests": p_count,
        "emulator_decode_requests": d_count,
        "emulator_decode_peak_running": [d.peak_running for d in decodes],
    })
    return line


def simulate_pair(prefill_model, decode_model, wire_bytes, link_bytes_per_s, concurrency,
                  num_prompts, input_len, output_len, client_rtt_s=None, link_latency_s=0.0):
    """A 1P1D pair: :func:`simulate_pd` with one prefill and one decode server (one link
    between them, FIFO, one transfer after the other)."""
    return simulate_pd([prefill_model], [decode_model], wire_bytes, link_bytes_per_s,
                       concurrency, num_prompts, input_len, output_len,
                       client_rtt_s=client_rtt_s, link_latency_s=link_latency_s)


def measure_pd(release, prefill_argv, decode_argv, link_bytes_per_s, concurrency,
               num_prompts, input_len, output_len, link_latency_s=0.0, n_prefill=1,
               n_decode=1, **kwargs):
    """:func:`simulate_pd` for ``n_prefill`` servers launched with ``prefill_argv`` and
    ``n_decode`` launched with ``decode_argv`` (``bench.server_model`` of each argv: every
    server of a role runs its role's argv, so they share its model and each gets its own
    scheduler). The wire bytes per token are the decode server's. Adds ``gpus``, the sum
    over all the servers."""
    from sglang._emulator import bench as _bench  # pylint: disable=import-outside-toplevel

    n_prefill, n_decode = int(n_prefill), int(n_decode)
    if n_prefill < 1 or n_decode < 1:
        raise ValueError("measure_pd needs n_prefill >= 1 and n_decode >= 1, got %d and %d"
                         % (n_prefill, n_decode))
    p_model, p_info = _bench.server_model(release, prefill_argv, **kwargs)
    d_model, d_info = _bench.server_model(release, decode_argv, **kwargs)
    wire = wire_bytes_per_token(d_info["memory"], d_info["layout"])
    line = simulate_pd([p_model] * n_prefill, [d_model] * n_decode, wire, link_bytes_per_s,
                       concurrency, num_prompts, input_len, output_len,
                       link_latency_s=link_latency_s)
    line["gpus"] = n_prefill * p_info["gpus"] + n_decode * d_info["gpus"]
    line["emulator_wire_bytes_per_token"] = wire
    return line


def measure_pair(release, prefill_argv, decode_argv, link_bytes_per_s, concurrency,
                 num_prompts, input_len, output_len, link_latency_s=0.0, **kwargs):
    """:func:`measure_pd` of a 1P1D pair (``gpus``: both servers')."""
    return measure_pd(release, prefill_argv, decode_argv, link_bytes_per_s, concurrency,
                      num_prompts, input_len, output_len, link_latency_s=link_latency_s,
                      n_prefill=1, n_decode=1, **kwargs)
