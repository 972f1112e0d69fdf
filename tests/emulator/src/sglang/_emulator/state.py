"""State directory and JSONL records, plus the stderr logger used everywhere."""

import json
import os
import sys
import threading
import time

DEFAULT_STATE_DIR = "/var/lib/sglang-emulator"

_log_lock = threading.Lock()


def env_number(name, default, kind=float):
    """The environment variable ``name`` as ``kind`` (float or int); ``kind(default)`` when
    it is unset, blank or not a number (the emulator's settings, the release's ``EnvInt``)."""
    raw = os.environ.get(name, "")
    try:
        return kind(raw) if raw.strip() else kind(default)
    except ValueError:
        return kind(default)


def log(msg, prefix=None):
    """One sglang-style log line on stderr: ``[2026-01-02 03:04:05 TP0] msg``."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    tag = "%s %s" % (stamp, prefix) if prefix else stamp
    with _log_lock:
        try:
            sys.stderr.write("[%s] %s\n" % (tag, msg))
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


SECRET_FLAGS = ("--api-key", "--admin-api-key")


def redacted_argv(argv):
    """The argv with the values of --api-key and --admin-api-key as ``<redacted>``."""
    argv = list(argv)
    return ["<redacted>" if i and argv[i - 1] in SECRET_FLAGS else a for i, a in enumerate(argv)]


def state_dir():
    """SGLANG_EMULATOR_STATE_DIR, else STATE_DIRECTORY (systemd), else the default.

    Created if missing. Returns None (after a warning) when it cannot be written.
    """
    path = os.environ.get("SGLANG_EMULATOR_STATE_DIR")
    if not path:
        # systemd may pass several colon-separated directories; use the first.
        path = (os.environ.get("STATE_DIRECTORY") or "").split(":")[0]
    if not path:
        path = DEFAULT_STATE_DIR
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, ".write-probe-%d" % os.getpid())
        with open(probe, "w", encoding="ascii") as fh:
            fh.write("ok")
        os.unlink(probe)
    except OSError as exc:
        sys.stderr.write(
            "WARNING: sglang emulator: state dir %s is not writable (%s); "
            "no state records will be kept\n" % (path, exc)
        )
        return None
    return path


def append_record(name, record):
    """Append one JSON line to ``<state_dir>/<name>``; never fails the caller."""
    path = state_dir()
    if path is None:
        return None
    line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode("utf-8")
    target = os.path.join(path, name)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError as exc:
        sys.stderr.write("WARNING: sglang emulator: cannot write %s (%s)\n" % (target, exc))
        return None
    return target
