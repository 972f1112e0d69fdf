# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""What runs where: the pure logic of ``server_status`` and ``playbooks/status.yml``.

* :func:`parse_exposition` / :func:`scheduler_metrics`: SGLang's Prometheus ``/metrics``;
* :func:`drift`: the files on disk and the port's owner against the deployment record;
* :func:`uptime_seconds`: the main process's age from ``systemctl show``;
* :func:`row`, :func:`problems`: one host's row and why it is unhealthy or drifted;
* :func:`table_header`, :func:`table_line`: the fleet table as fixed-width text (the
  playbook prints the header once and every host's line, and writes the rows as JSON).

The metric names are SGLang's own. ``SchedulerMetricsCollector.__init__`` in
``python/sglang/srt/metrics/collector.py`` defines them as prometheus_client Gauges,
read in the released wheels from PyPI:

* 0.5.9: ``sglang:num_running_reqs`` l.306-311, ``sglang:gen_throughput`` l.348-353,
  ``sglang:num_queue_reqs`` l.354-359;
* 0.5.4.post3: l.199-204, l.235-240, l.241-246; 0.4.6.post5: l.159-164, l.180-185,
  l.187-192 (the same three names in every release).

Their labels (0.5.9 ``srt/managers/scheduler_metrics_mixin.py`` l.114-122):
``model_name`` (the served model name), ``engine_type`` (``unified``, ``prefill`` or
``decode``), ``tp_rank``, ``pp_rank``, ``moe_ep_rank`` and, with data parallelism,
``dp_rank``. The server exposes ``/metrics`` only when started with ``--enable-metrics``
(``srt/server_args.py`` l.381 ``enable_metrics: bool = False``; ``srt/entrypoints/
http_server.py`` l.263-264 mounts it through ``utils/common.py`` l.1571-1581).

**Prefill/decode (PD) role** (:func:`pd_from_argv`, :func:`pd_from_record`, :func:`pd_of`):
what the server runs says it, ``--disaggregation-mode prefill|decode`` (``null``, the
release's default, or no flag: co-located) with ``--disaggregation-bootstrap-port`` on a
prefill server (SGLang's default 8998, ``check/_pd.py``). Read from the main process's
command line (``/proc/<MainPID>/cmdline``, the module reads it), else from the deployment
record (its ``argv``, else its ``pd`` placements, ``check/_pd_roles.previous_from_records``).
The process and the record disagreeing on the role is drift. The peers of a PD server are
the fleet's (``_status_fleet``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

from ansible_collections.gpufleet.sglang.plugins.module_utils.check._pd import DEFAULT_BOOTSTRAP_PORT
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import PD_ROLES
from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout._server_unit import pending_now, restart_owed

# SGLang's metric names (see the module docstring for where they are defined).
METRICS = {
    "running": "sglang:num_running_reqs",
    "queued": "sglang:num_queue_reqs",
    "gen_throughput": "sglang:gen_throughput",
}

# One sample line: name, optional {labels}, value, optional timestamp.
_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"(?:\{(?P<labels>.*)\})?"
    r"\s+(?P<value>\S+)"
    r"(?:\s+(?P<ts>-?\d+))?\s*$"
)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _labels(text):
    labels = {}
    pos = 0
    text = text or ""
    while pos < len(text.rstrip()):
        match = _LABEL.match(text, pos)
        if not match:
            raise ValueError("bad labels: {%s}" % text)
        labels[match.group(1)] = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)],
                                        match.group(2))
        pos = match.end()
    return labels


def _number(text):
    lowered = text.lower()
    if lowered in ("+inf", "inf"):
        return float("inf")
    if lowered == "-inf":
        return float("-inf")
    if lowered == "nan":
        return float("nan")
    return float(text)


def parse_exposition(text):
    """Samples of a Prometheus text exposition: ``[(name, labels, value)]``.

    Comment lines (``# HELP``, ``# TYPE``) and blank lines are skipped; a line that is
    not a sample raises ValueError naming it.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    samples = []
    for line in (text or "").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _SAMPLE.match(stripped)
        if not match:
            raise ValueError("not a Prometheus sample: %r" % stripped[:120])
        try:
            value = _number(match.group("value"))
        except ValueError:
            raise ValueError("not a Prometheus sample value: %r" % stripped[:120])
        samples.append((match.group("name"), _labels(match.group("labels")), value))
    return samples


def _reporting(labels):
    """Whether a series comes from a scheduler that reports for its whole group.

    By default only TP rank 0 (of each PP stage and DP rank) records; with
    ``--enable-metrics-for-all-schedulers`` every TP rank repeats the same batch, so only
    TP rank 0 and PP rank 0 are counted. DP ranks hold different requests and add up.
    """
    return labels.get("tp_rank", "0") == "0" and labels.get("pp_rank", "0") == "0"


def scheduler_metrics(text, model_name=None):
    """Running and queued requests and generation throughput from a ``/metrics`` text.

    Returns ``{"running", "queued", "gen_throughput"}``: the sum over the reporting
    series (see :func:`_reporting`) of ``model_name`` when given; ``None`` for a metric the
    text lacks. ``running`` and ``queued`` are ints, ``gen_throughput`` tokens/s.
    """
    wanted = dict((name, key) for key, name in METRICS.items())
    found = {}
    for name, labels, value in parse_exposition(text):
        key = wanted.get(name)
        if key is None or not _reporting(labels):
            continue
        if model_name is not None and labels.get("model_name", model_name) != model_name:
            continue
        found[key] = found.get(key, 0.0) + value
    out = {}
    for key in METRICS:
        value = found.get(key)
        if value is None or math.isnan(value):
            out[key] = None
        elif key == "gen_throughput":
            out[key] = round(value, 2)
        else:
            out[key] = int(value)
    return out


UNREADABLE = "unreadable"

# ---------------------------------------------------------------------------------------
# The prefill/decode role of what a server runs.
# ---------------------------------------------------------------------------------------

# PD_ROLES (prefill, decode) are check/_strategy's; a role of None is a co-located server
# (``--disaggregation-mode null``, SGLang's ``DisaggregationMode.NULL``, whose metrics say
# ``engine_type="unified"``).
PD_MODE_FLAG = "--disaggregation-mode"
PD_PORT_FLAG = "--disaggregation-bootstrap-port"
PD_BACKEND_FLAG = "--disaggregation-transfer-backend"
NODE_RANK_FLAG = "--node-rank"
#: How the table names a co-located server's role.
CO_LOCATED = "-"


def _flag_values(argv, flag):
    """Every value of ``flag`` in ``argv`` (``--flag value`` and ``--flag=value``), in order;
    argparse keeps the last."""
    out = []
    argv = [("%s" % a) for a in argv or []]
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            out.append(argv[index + 1])
        elif arg.startswith(flag + "="):
            out.append(arg[len(flag) + 1:])
    return out


def _last_int(argv, flag):
    values = _flag_values(argv, flag)
    try:
        return int(values[-1]) if values else None
    except ValueError:
        return None


def pd_from_argv(argv):
    """The PD facts of a server's command line: ``{"role", "bootstrap_port",
    "transfer_backend", "node_rank"}``.

    ``role`` is ``prefill``, ``decode``, or None for a co-located server (no
    ``--disaggregation-mode``, or ``null``); an unknown mode is kept as given (the server
    would not have started with it). ``bootstrap_port`` (prefill only) is
    ``--disaggregation-bootstrap-port``, else SGLang's default 8998; ``node_rank`` is
    ``--node-rank`` (0 when absent: rank 0 serves HTTP and, on a prefill server, the
    bootstrap server).
    """
    modes = _flag_values(argv, PD_MODE_FLAG)
    mode = modes[-1].strip().lower() if modes else ""
    role = None if mode in ("", "null", "none") else mode
    backend = _flag_values(argv, PD_BACKEND_FLAG)
    port = None
    if role == "prefill":
        port = _last_int(argv, PD_PORT_FLAG) or DEFAULT_BOOTSTRAP_PORT
    return {"role": role, "bootstrap_port": port,
            "transfer_backend": (backend[-1] if backend else None) if role else None,
            "node_rank": _last_int(argv, NODE_RANK_FLAG) or 0}


def cmdline_argv(data):
    """A ``/proc/<pid>/cmdline``'s bytes as a list, or None when there is none or it is not
    an SGLang server's (``sglang.launch_server``, directly or through the collection's
    launcher): a process that renamed itself says nothing about its flags."""
    if not data:
        return None
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    argv = data.split("\0")
    if argv and argv[-1] == "":
        argv.pop()
    if not any(a.endswith("launch_server") for a in argv):
        return None
    return argv


def pd_from_record(record):
    """The PD facts of a deployment record (:func:`pd_from_argv`'s keys), or None without
    a record. The record's ``argv`` says it; a record without one falls back to its ``pd``
    key (the placements ``check/_pd_roles`` reads: a list of ``{"role", ...}`` or a role's
    name; two roles on one host read ``prefill+decode``)."""
    if not isinstance(record, dict) or not record:
        return None
    if isinstance(record.get("argv"), list) and record["argv"]:
        return pd_from_argv(record["argv"])
    value = record.get("pd")
    items = value if isinstance(value, list) else [value] if value else []
    roles = []
    for item in items:
        role = item.get("role") if isinstance(item, dict) else item
        if role in PD_ROLES and role not in roles:
            roles.append(role)
    roles.sort(key=PD_ROLES.index)
    role = "+".join(roles) or None
    return {"role": role, "bootstrap_port": DEFAULT_BOOTSTRAP_PORT if "prefill" in roles else None,
            "transfer_backend": None, "node_rank": 0}


def _role_text(role):
    return role or "co-located"


def pd_of(process_argv, record):
    """``(facts, source, drift)``: the server's PD facts from what runs (``process_argv``,
    :func:`cmdline_argv`'s), else the record; ``source`` ``process``, ``record`` or None
    (neither); ``drift`` names a process whose role the record does not say."""
    recorded = pd_from_record(record)
    if process_argv:
        running = pd_from_argv(process_argv)
        reasons = []
        if recorded is not None and isinstance((record or {}).get("argv"), list) \
                and record["argv"] and recorded["role"] != running["role"]:
            runs = ("as %s (%s %s)" % (running["role"], PD_MODE_FLAG, running["role"])
                    if running["role"] else "co-located (no %s)" % PD_MODE_FLAG)
            reasons.append("the process runs %s, the deployment record says %s"
                           % (runs, _role_text(recorded["role"])))
        return running, "process", reasons
    if recorded is not None:
        return recorded, "record", []
    return {"role": None, "bootstrap_port": None, "transfer_backend": None, "node_rank": 0}, None, []


def _file_drift(label, recorded, on_disk):
    if not recorded:
        return []
    if on_disk is None:
        return ["%s is missing" % label]
    if on_disk == UNREADABLE:
        return ["%s cannot be read (run as root or with become)" % label]
    if on_disk != recorded:
        return ["%s differs from the deployment record" % label]
    return []


def drift(record, unit_sha1, env_sha1, port_verdict=None):
    """Why the host differs from its deployment record ([] when it does not).

    ``unit_sha1`` / ``env_sha1`` are the sha1 of the files on disk, None when missing,
    :data:`UNREADABLE` when they exist but cannot be read; ``port_verdict`` is
    :func:`_port_owner.decide`'s answer (or None when not checked). A record without
    ``env_sha1`` (written before it was recorded) cannot tell env drift.
    """
    record = record if isinstance(record, dict) else {}
    reasons = []
    if not record:
        return reasons
    reasons.extend(_file_drift("unit file", record.get("unit_sha1"), unit_sha1))
    reasons.extend(_file_drift("environment file", record.get("env_sha1"), env_sha1))
    if port_verdict and port_verdict.get("owner") == "other":
        who = ", ".join(port_verdict.get("programs") or []) or "a process of unknown owner"
        pids = ", ".join("%s" % p for p in port_verdict.get("pids") or []) or "?"
        reasons.append("port %s is held by %s (pid %s), not by our unit"
                       % (port_verdict.get("port"), who, pids))
    return reasons


def uptime_seconds(props, now_monotonic_usec):
    """Seconds the main process has run, from ``systemctl show`` properties, or None.

    Uses ``ExecMainStartTimestampMonotonic`` (else ``ActiveEnterTimestampMonotonic``),
    microseconds on CLOCK_MONOTONIC, against ``now_monotonic_usec`` on the same clock.
    None when the unit is not active or has no main process.
    """
    if props.get("ActiveState") != "active":
        return None
    try:
        if int(props.get("MainPID") or 0) <= 0:
            return None
    except ValueError:
        return None
    for key in ("ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic"):
        try:
            started = int(props.get(key) or 0)
        except ValueError:
            continue
        if started > 0:
            return max(0, int((now_monotonic_usec - started) // 1000000))
    return None


def human_duration(seconds):
    """``93784`` -> ``'1d2h3m'``; ``59`` -> ``'59s'``; None -> ``'-'``."""
    if seconds is None:
        return "-"
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return "%dd%dh%dm" % (days, hours, minutes)
    if hours:
        return "%dh%dm" % (hours, minutes)
    if minutes:
        return "%dm%ds" % (minutes, secs)
    return "%ds" % secs


def problems(row_):
    """Why a row's host is unhealthy or drifted, each reason one string ([] when healthy)."""
    reasons = []
    if not row_.get("deployed"):
        reasons.append("no deployment record (%s)" % row_.get("record_path"))
    state = row_.get("active_state")
    if state != "active":
        reasons.append("unit %s is %s" % (row_.get("unit"), state or "unknown"))
    if not row_.get("ready"):
        route = row_.get("ready_route") or "no readiness route"
        reasons.append("not ready (%s: %s)" % (route, row_.get("ready_detail") or "unknown"))
    reasons.extend("drift: %s" % reason for reason in row_.get("drift") or [])
    return reasons


def row(host, record, props, now_monotonic_usec, readiness, metrics, drift_reasons, port,
        unit, record_path, process_argv=None):
    """One host's row of the fleet table.

    ``readiness``: ``{"route", "ready", "detail"}``; ``metrics``: ``{"available",
    "detail", "running", "queued", "gen_throughput"}``. ``pending`` lists the unit's
    directives installed but not yet applied to the running process (the record's, while
    the main PID it was recorded for still runs); it is no problem. ``process_argv``: the
    main process's command line (:func:`cmdline_argv`'s, None when unknown), for the PD
    role (:func:`pd_of`); ``pd_peers`` is the fleet's to fill (None here).
    """
    record = record if isinstance(record, dict) else {}
    try:
        pid = int(props.get("MainPID") or 0) or None
    except ValueError:
        pid = None
    uptime = uptime_seconds(props, now_monotonic_usec)
    pd, pd_source, pd_drift = pd_of(process_argv if pid else None, record)
    out = {
        "host": host,
        "deployed": bool(record),
        "record_path": record_path,
        "strategy": record.get("strategy"),
        "release": record.get("release"),
        "deployed_at": record.get("deployed_at"),
        "unit": unit,
        "port": port,
        "active_state": props.get("ActiveState") or None,
        "main_pid": pid,
        "uptime_s": uptime,
        "uptime": human_duration(uptime),
        "ready_route": readiness.get("route"),
        "ready": bool(readiness.get("ready")),
        "ready_detail": readiness.get("detail"),
        "metrics": metrics.get("detail"),
        "running": metrics.get("running"),
        "queued": metrics.get("queued"),
        "gen_throughput": metrics.get("gen_throughput"),
        "drift": list(drift_reasons or []) + pd_drift + (
            ["restart owed: the installed unit was never started (main PID %d runs the one "
             "before it)" % pid] if restart_owed(record, pid) else []),
        "pending": pending_now(record, pid),
        "pd_role": pd["role"],
        "pd_source": pd_source,
        "pd_bootstrap_port": pd["bootstrap_port"],
        "pd_transfer_backend": pd["transfer_backend"],
        "pd_node_rank": pd["node_rank"],
        "pd_peers": None,
    }
    out["drifted"] = bool(out["drift"])
    out["problems"] = problems(out)
    out["healthy"] = not [p for p in out["problems"] if not p.startswith("drift: ")]
    out["ok"] = not out["problems"]
    out["verdict"] = "%s: %s" % (host, "; ".join(out["problems"]) or "ok")
    out["line"] = table_line(out)
    return out


# (title, width, row key or callable); the last column takes the rest of the line.
def _dash(value):
    return "-" if value is None or value == "" else "%s" % (value,)


def pd_cell(row_):
    """``prefill:<bootstrap port>``, ``decode``, or ``-`` (co-located)."""
    role = row_.get("pd_role")
    if not role:
        return CO_LOCATED
    if role == "prefill" and row_.get("pd_bootstrap_port"):
        return "prefill:%s" % row_["pd_bootstrap_port"]
    return role


PEERS_WIDTH = 24


def peers_cell(row_, width=PEERS_WIDTH):
    """The peers' hosts (the other role's servers), as many as fit, then ``+N``; ``?`` when
    the fleet could not tell them (None), ``none`` when it has none, ``-`` co-located."""
    if not row_.get("pd_role"):
        return CO_LOCATED
    peers = row_.get("pd_peers")
    if peers is None:
        return "?"
    if not peers:
        return "none"
    names = [p["host"] if isinstance(p, dict) else "%s" % p for p in peers]
    shown = []
    for index, name in enumerate(names):
        rest = len(names) - index - 1
        if len(",".join(shown + [name]) + (",+%d" % rest if rest else "")) >= width:
            break
        shown.append(name)
    if not shown:
        return ",".join(names)  # the cell cuts it
    rest = len(names) - len(shown)
    return ",".join(shown + (["+%d" % rest] if rest else []))


#: The PD columns, after STRATEGY, in the fleet's table when a server of it has a role.
PD_COLUMNS = (
    ("PD", 14, pd_cell),
    ("PEERS", PEERS_WIDTH, peers_cell),
)

COLUMNS = (
    ("HOST", 20, lambda r: _dash(r.get("host"))),
    ("STRATEGY", 10, lambda r: _dash(r.get("strategy"))),
    ("RELEASE", 12, lambda r: _dash(r.get("release"))),
    ("PID", 8, lambda r: _dash(r.get("main_pid"))),
    ("UPTIME", 9, lambda r: _dash(r.get("uptime"))),
    ("READY", 6, lambda r: "yes" if r.get("ready") else "NO"),
    ("RUN", 5, lambda r: _dash(r.get("running"))),
    ("QUEUE", 6, lambda r: _dash(r.get("queued"))),
    ("GEN_TOK/S", 10, lambda r: "-" if r.get("gen_throughput") is None
     else "%.1f" % r["gen_throughput"]),
    ("DEPLOYED_AT", 21, lambda r: _dash(r.get("deployed_at"))),
    ("PENDING", 16, lambda r: ",".join(p.split(".", 1)[-1] for p in r.get("pending") or []) or "-"),
    ("DRIFT", 0, lambda r: "; ".join(r.get("drift") or []) or "no"),
)


def columns(pd=False):
    """The table's columns: :data:`COLUMNS`, with :data:`PD_COLUMNS` after STRATEGY when
    ``pd``."""
    if not pd:
        return COLUMNS
    return COLUMNS[:2] + PD_COLUMNS + COLUMNS[2:]


def _cells(values, pd=False):
    out = []
    for column, value in zip(columns(pd), values):
        width = column[1]
        if width:
            text = value if len(value) < width else value[:width - 2] + "~"
            out.append(text.ljust(width))
        else:
            out.append(value)
    return " ".join(out).rstrip()


def table_header(pd=False):
    """The fixed-width header line of the fleet table (with the PD columns when ``pd``)."""
    return _cells([column[0] for column in columns(pd)], pd)


def table_line(row_, pd=False):
    """One row as a fixed-width line under :func:`table_header` of the same ``pd``."""
    return _cells([column[2](row_) for column in columns(pd)], pd)
