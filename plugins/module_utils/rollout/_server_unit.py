# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Pure helpers of the ``server_unit`` module: quoting, rendering, decisions, the record.

Nothing here touches the host. :func:`render_unit` and :func:`render_env` produce the
same text as the role's former ``server.service.j2`` and ``server.env.j2`` templates
(with a fixed header line instead of ``ansible_managed``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import re

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files, _secret_exec
from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout import _unit_spec

HEADER = "# Managed by gpufleet.sglang (server_unit); local changes are overwritten."

_PLAIN = re.compile(r"^[A-Za-z0-9_./:=,+@%$-]+$")

LAYOUT_KEYS = ("tp", "pp", "ep", "dp")

# The unit's Documentation= (the collection's hardening notes).
DOCUMENTATION_URL = "https://example.invalid/gpufleet/sglang/blob/main/docs/hardening.md"

RECORD_KEYS = ("strategy", "layout", "release", "argv", "unit_sha1", "env_sha1", "service", "port",
               "deployed_at", "run_sha256", "run_spec_version", "pending", "pending_pid",
               "restart_owed_pid")


def systemd_arg(value):
    """Quote one argument for a systemd ``ExecStart=`` line.

    systemd splits ExecStart on whitespace, honours double quotes with C escapes,
    expands ``%`` specifiers and ``$VAR`` references; all of those are neutralised.
    Raises ValueError for a value holding a NUL byte.
    """
    if isinstance(value, bool):
        value = "true" if value else "false"
    text = "%s" % (value,)
    if "\x00" in text:
        raise ValueError("argument %r contains a NUL byte" % text[:40])
    text = text.replace("%", "%%").replace("$", "$$")
    if _PLAIN.match(text):
        return text
    escaped = (
        text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    )
    return '"%s"' % escaped


def argv_lines(argv):
    """Group a launch_server argv into ExecStart lines.

    Each ``--flag`` starts a line; the values that follow it join that line. Every item
    is quoted with :func:`systemd_arg`.
    """
    lines = []
    for arg in argv or []:
        quoted = systemd_arg(arg)
        if ("%s" % (arg,)).startswith("--") or not lines:
            lines.append(quoted)
        else:
            lines[-1] = lines[-1] + " " + quoted
    return lines


def _text(value):
    """A scalar as the templates printed it (``None`` and missing as empty)."""
    return "" if value is None else "%s" % (value,)


def _env_quote(value):
    return '"%s"' % _text(value).replace("\\", "\\\\").replace('"', '\\"')


def _layout(p):
    layout = p.get("layout") or {}
    missing = [key for key in LAYOUT_KEYS if key not in layout]
    if missing:
        raise ValueError("layout lacks %s (it needs tp, pp, ep and dp)" % ", ".join(missing))
    return layout


def strategy_of(p):
    """The strategy name: ``strategy``, else the layout's ``name``."""
    name = p.get("strategy") or (p.get("layout") or {}).get("name")
    if not name:
        raise ValueError("strategy (or layout.name) is required")
    return name


def render_unit(p):
    """The systemd unit text for the parameters ``p``."""
    layout = _layout(p)
    name = strategy_of(p)
    release = _text(p.get("release"))
    lines = argv_lines(p.get("argv"))
    # With an API key the unit starts through the collection's launcher, which appends
    # --api-key in-process from SGLANG_API_KEY (out of /proc/<pid>/cmdline) and redacts it
    # from the output (SGLang 0.5.9 logs its ServerArgs, key included, at every start).
    start = [p.get("python")]
    if _text(p.get("api_key")):
        start = _secret_exec.prefix(p.get("python"), "SGLANG_API_KEY", p.get("secret_exec"))
    out = [
        HEADER,
        "# Strategy %s (tp %s, pp %s, ep %s, dp %s) on SGLang %s." % (
            name, layout["tp"], layout["pp"], layout["ep"], layout["dp"], release),
        "[Unit]",
        "Description=SGLang server (%s, SGLang %s)" % (name, release),
        "Documentation=%s" % DOCUMENTATION_URL,
        "After=network-online.target",
        "Wants=network-online.target",
        "StartLimitIntervalSec=%s" % _text(p.get("start_limit_interval_sec")),
        "StartLimitBurst=%s" % _text(p.get("start_limit_burst")),
        "",
        "[Service]",
        "Type=simple",
        "User=%s" % _text(p.get("user")),
        "Group=%s" % _text(p.get("group")),
        "SupplementaryGroups=%s" % " ".join(_text(g) for g in (p.get("device_groups") or [])),
        "WorkingDirectory=%s" % _text(p.get("home")),
        "EnvironmentFile=%s/%s.env" % (_text(p.get("config_dir")), _text(p.get("service_name"))),
        # The templates ended the line with " \" even without arguments, which joined
        # Restart= into ExecStart=; without arguments the line simply ends here.
        "ExecStart=%s -m sglang.launch_server%s" % (" ".join(systemd_arg(a) for a in start),
                                                    " \\" if lines else ""),
    ]
    for index, line in enumerate(lines):
        out.append("    %s%s" % (line, " \\" if index < len(lines) - 1 else ""))
    out.extend([
        "Restart=on-failure",
        "RestartSec=%s" % _text(p.get("restart_sec")),
        "KillMode=control-group",
        "TimeoutStopSec=%s" % _text(p.get("timeout_stop_sec")),
        "LimitNOFILE=65536",
        "LimitMEMLOCK=infinity",
        "# Sandboxing that SGLang tolerates; docs/hardening.md lists what is left out and why",
        "# (GPU device nodes, JIT compilers, NCCL sockets and /dev/shm must stay usable).",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
        "PrivateTmp=yes",
        "PrivateMounts=yes",
        "ProtectSystem=strict",
        "ReadWritePaths=%s" % _text(p.get("home")),
        "ProtectHome=read-only",
        "ProtectProc=invisible",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectKernelLogs=yes",
        "ProtectControlGroups=yes",
        "ProtectClock=yes",
        "ProtectHostname=yes",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
        "RestrictNamespaces=yes",
        "RestrictSUIDSGID=yes",
        "RestrictRealtime=yes",
        "LockPersonality=yes",
        "SystemCallArchitectures=native",
        "SystemCallFilter=~@clock @cpu-emulation @module @mount @obsolete @raw-io @reboot @swap",
        "SystemCallErrorNumber=EPERM",
        "RemoveIPC=yes",
        "KeyringMode=private",
        "UMask=0027",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ])
    return "\n".join(out) + "\n"


def _env_sort_key(item):
    # Jinja's dictsort: case-insensitive by key
    key = item[0]
    return key.lower() if isinstance(key, str) else key


def render_env(p):
    """The environment file text (it holds the secrets) for the parameters ``p``."""
    out = [
        HEADER,
        "# Environment of %s.service. Mode 0600: it holds secrets." % _text(p.get("service_name")),
        "HOME=%s" % _text(p.get("home")),
    ]
    if _text(p.get("api_key")):
        out.append("SGLANG_API_KEY=%s" % _env_quote(p.get("api_key")))
    if _text(p.get("hf_token")):
        out.append("HF_TOKEN=%s" % _env_quote(p.get("hf_token")))
    if _text(p.get("pp_layer_partition")):
        out.append("SGLANG_PP_LAYER_PARTITION=%s" % _text(p.get("pp_layer_partition")))
    for name, value in sorted((p.get("environment") or {}).items(), key=_env_sort_key):
        out.append("%s=%s" % (name, _env_quote(value)))
    return "\n".join(out) + "\n"


def mask_env(text):
    """The environment file with every value replaced by ``***`` (names and comments stay)."""
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            out.append(line)
        elif "=" in line:
            out.append("%s=***" % line.split("=", 1)[0])
        else:
            out.append("***")
    return "\n".join(out) + ("\n" if out else "")


def decide(installed_unit, installed_env, new_unit, new_env):
    """Which files differ by a byte (the byte rule; :func:`plan` decides the restart).

    ``installed_*`` is ``None`` when the file does not exist. Returns a dict with
    ``unit_changed``, ``env_changed``, ``restart`` (the byte rule the collection restarted
    on before 0.2.0: either file differs) and ``has_last_good`` (an installed unit and
    environment exist, so there is something to roll back to).
    """
    unit_changed = installed_unit is None or installed_unit != new_unit
    env_changed = installed_env is None or installed_env != new_env
    return {
        "unit_changed": unit_changed,
        "env_changed": env_changed,
        "restart": unit_changed or env_changed,
        "has_last_good": installed_unit is not None and installed_env is not None,
    }


def _sha1(data):
    if data is None:
        return None
    if not isinstance(data, bytes):
        data = data.encode("utf-8")
    return _files.digest_bytes(data, "sha1")


def pending_now(rec, main_pid):
    """What the record says is pending, while the process it was recorded for still runs.

    The record keeps ``pending`` (directives installed but not applied) with
    ``pending_pid``, the main PID that runs without them; once another process runs (a
    restart by anyone) or none does, they are applied and nothing is pending.
    """
    rec = rec if isinstance(rec, dict) else {}
    pending = list(rec.get("pending") or [])
    if not pending or not main_pid or rec.get("pending_pid") != main_pid:
        return []
    return pending


def installed_run(rec, installed_unit, installed_env, env_path):
    """``(digest, spec, source)`` of what the installed server runs.

    The record's ``run_sha256`` is used when it is of this spec version and the record
    still describes the installed files (their sha1); otherwise (a record of an older
    release, a local edit) the spec is computed from the installed files with the
    record's release. ``spec`` is always computed from the files, to name the changes.
    """
    rec = rec if isinstance(rec, dict) else {}
    spec = _unit_spec.run_spec(installed_unit, {env_path: installed_env}, rec.get("release"))
    recorded = rec.get("run_sha256")
    if (recorded and rec.get("run_spec_version") == _unit_spec.SPEC_VERSION
            and rec.get("unit_sha1") == _sha1(installed_unit)
            and rec.get("env_sha1") == _sha1(installed_env)):
        return recorded, spec, "record"
    return _unit_spec.digest(spec), spec, "files"


def plan(installed_unit, installed_env, new_unit, new_env, env_path, release, rec=None,
         main_pid=None, apply_pending=False):
    """Whether to install the files and whether the server must restart (issue 23).

    The restart follows what runs (:func:`_unit_spec.run_spec`): the argv, environment,
    account, device access, limits, working directory, release, venv and model path. A
    change of reload-only directives is installed with daemon-reload (``reload``), which
    puts it in effect (no restart, never ``pending``); a change of sandboxing is installed
    and ``pending`` until the next restart, which ``apply_pending`` makes now.
    ``main_pid`` is the unit's running main PID (None when it does not run); ``rec`` the
    deployment record on the host.

    Returns :func:`decide`'s keys (``byte_rule_restart`` is its ``restart``) plus
    ``install``, ``restart``, ``action`` (``install``, ``restart``, ``apply_pending``,
    ``pending``, ``reload``, ``comments`` or ``none``), ``run_changes``, ``reload``,
    ``pending`` (what stays pending after this run), ``pending_pid``, ``run_sha256`` and
    ``previous_from`` (``record``, ``files`` or None on a first install).
    """
    files = decide(installed_unit, installed_env, new_unit, new_env)
    new_spec = _unit_spec.run_spec(new_unit, {env_path: new_env}, release)
    out = dict(files)
    out["byte_rule_restart"] = files["restart"]
    out["run_sha256"] = _unit_spec.digest(new_spec)
    out["install"] = files["unit_changed"] or files["env_changed"]
    if not files["has_last_good"]:
        out.update(restart=True, action="install", run_changes=[], reload=[], pending=[],
                   applied=[], pending_pid=None, previous_from=None,
                   restart_owed_pid=main_pid)
        return out
    old_digest, old_spec, source = installed_run(rec, installed_unit, installed_env, env_path)
    out["previous_from"] = source
    changes = [] if old_digest == out["run_sha256"] else (
        _unit_spec.run_changes(old_spec, new_spec) or ["recorded run spec"])
    if not changes and restart_owed(rec, main_pid):
        # the files were installed for a restart that never came (the controller stopped
        # between the install and the handler): the process that runs is the old one
        changes = ["restart owed since the last install (main PID %d still runs)" % main_pid]
    side = _unit_spec.side_changes(installed_unit, new_unit)
    pending = sorted(set(pending_now(rec, main_pid)) | set(side[_unit_spec.PENDING] if main_pid else []))
    out["run_changes"] = changes
    out["reload"] = side[_unit_spec.RELOAD]
    if changes:
        action = "restart"
    elif pending and apply_pending:
        action = "apply_pending"
    elif pending:
        action = "pending"
    elif out["reload"]:
        action = "reload"
    elif out["install"]:
        action = "comments"
    else:
        action = "none"
    out["restart"] = action in ("restart", "apply_pending")
    out["action"] = action
    out["applied"] = pending if out["restart"] else []
    out["pending"] = [] if out["restart"] else pending
    out["pending_pid"] = main_pid if out["pending"] else None
    # the process the restart must replace; kept as it was when nothing restarts, so a
    # no-op writes the same record
    out["restart_owed_pid"] = main_pid if out["restart"] else (rec or {}).get("restart_owed_pid")
    return out


def restart_owed(rec, main_pid):
    """Whether the record says that the running process was to be restarted: the install
    that needed the restart recorded this main PID (``restart_owed_pid``), and it still
    runs. Once the restart happened (another PID), or nothing runs, nothing is owed."""
    rec = rec if isinstance(rec, dict) else {}
    return bool(main_pid) and rec.get("restart_owed_pid") == main_pid


def summary(result):
    """One line on what the unit step did, from :func:`plan`'s keys."""
    action = result.get("action")
    if action == "install":
        return "installed"
    if action == "restart":
        return "restart: %s changed" % ", ".join(result.get("run_changes") or [])
    parts = []
    if action == "apply_pending":
        parts.append("restart to apply pending: %s" % ", ".join(result.get("applied") or []))
    if result.get("pending"):
        parts.append("pending: applies at the next restart: %s" % ", ".join(result["pending"]))
    reload = result.get("reload") or []
    now = [name for name in reload if _unit_spec.reload_effect(name) == _unit_spec.DAEMON_RELOAD]
    enable = [name for name in reload if _unit_spec.reload_effect(name) == _unit_spec.ENABLE]
    if now:
        # systemd's manager reads these from the unit it loaded: the step's daemon-reload
        # put them in effect, and nothing waits for a restart
        parts.append("installed, takes effect at the daemon-reload of this run, no restart: %s"
                     % ", ".join(now))
    if enable:
        parts.append("installed, read at the next systemctl enable, no restart: %s"
                     % ", ".join(enable))
    if not parts and action == "comments":
        parts.append("installed, comments only")
    return "; ".join(parts) or "no change"


def port_of(p):
    """``port``, else the value of ``--port`` in argv, else None."""
    if p.get("port") is not None:
        return int(p["port"])
    argv = list(p.get("argv") or [])
    for index, arg in enumerate(argv):
        if arg == "--port" and index + 1 < len(argv):
            try:
                return int(argv[index + 1])
            except (TypeError, ValueError):
                return None
        if isinstance(arg, str) and arg.startswith("--port="):
            try:
                return int(arg.split("=", 1)[1])
            except ValueError:
                return None
    return None


def format_time(now):
    """``now`` (datetime or text) as ``YYYY-MM-DDTHH:MM:SSZ`` in UTC."""
    if isinstance(now, datetime.datetime):
        if now.tzinfo is not None:
            now = now.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return "%s" % (now,)


def record(previous, p, unit_sha1, now, restarted, env_sha1=None, decision=None):
    """The deployment record.

    ``unit_sha1`` and ``env_sha1`` are the sha1 of the unit and environment file texts, so
    that drift of either file on disk can be told (``playbooks/status.yml``).
    ``decision`` is :func:`plan`'s answer: the record keeps ``run_sha256`` (the digest of
    what runs, with ``run_spec_version``), ``pending`` and ``pending_pid``.

    ``deployed_at`` is ``now`` when the server was (re)installed (``restarted``) or the
    previous record has none; otherwise the previous record's time is kept, so a no-op
    re-run writes the same record again.
    """
    previous = previous if isinstance(previous, dict) else {}
    if restarted or "deployed_at" not in previous:
        deployed_at = format_time(now)
    else:
        deployed_at = previous["deployed_at"]
    rec = {
        "strategy": strategy_of(p),
        "layout": p.get("layout"),
        "release": p.get("release"),
        "argv": list(p.get("argv") or []),
        "unit_sha1": unit_sha1,
        "env_sha1": env_sha1,
        "service": p.get("service_name"),
        "port": port_of(p),
        "deployed_at": deployed_at,
        "run_sha256": (decision or {}).get("run_sha256"),
        "run_spec_version": _unit_spec.SPEC_VERSION,
        "pending": list((decision or {}).get("pending") or []),
        "pending_pid": (decision or {}).get("pending_pid"),
        "restart_owed_pid": (decision or {}).get("restart_owed_pid"),
    }
    if p.get("server_args"):
        # the release's own derivation: what it changed against what was asked
        rec["server_args"] = p["server_args"]
    return rec


def read_bytes(path):
    """A file's bytes, or None when it does not exist or cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def record_text(rec):
    """The record file's text, as ``to_nice_json`` wrote it, with a final newline."""
    return json.dumps(rec, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def parse_record(text):
    """A record file's text as a dict ({} when empty, missing or not a JSON object)."""
    if not text:
        return {}
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


NOLOGIN = "/usr/sbin/nologin"


def account_settings(p):
    """The server account as wanted: user, primary group, device groups, home, shell."""
    return {"user": p["user"], "group": p["group"], "groups": list(p["device_groups"]),
            "home": p["home"], "shell": NOLOGIN}


def useradd_args(wanted):
    """useradd arguments that create the system account (its home is the unit's to create)."""
    args = ["--system", "--gid", wanted["group"], "--home-dir", wanted["home"], "--no-create-home",
            "--shell", wanted["shell"]]
    if wanted["groups"]:
        args += ["--groups", ",".join(wanted["groups"])]
    return args + [wanted["user"]]


def usermod_args(wanted, current, group_gid, memberships):
    """usermod arguments that fix what differs ([] when nothing does).

    ``current`` holds the user's gid, home and shell; ``memberships`` maps each device group
    to whether the user is a member already. Supplementary groups are only added.
    """
    args = []
    if group_gid is not None and current["gid"] != group_gid:
        args += ["--gid", wanted["group"]]
    missing = [g for g in wanted["groups"] if not memberships.get(g)]
    if missing:
        args += ["--append", "--groups", ",".join(missing)]
    if current["home"] != wanted["home"]:
        args += ["--home", wanted["home"]]
    if current["shell"] != wanted["shell"]:
        args += ["--shell", wanted["shell"]]
    return args + [wanted["user"]] if args else []
