# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Run a Python entry point with secrets from its environment as arguments, keeping them
out of the process list and out of what the process prints.

Installed by gpufleet.sglang as /usr/local/libexec/gpufleet-sglang/secret_exec.py; the
server and router units start through it when they have an API key::

    <venv>/bin/python secret_exec.py --api-key=SGLANG_API_KEY -- -m sglang.launch_server ...

Why: SGLang's server and router take their API key only as ``--api-key VALUE``. Passed on
the command line (systemd expanding ``${SGLANG_API_KEY}``), the value sits in
``/proc/<pid>/cmdline``, which every local user can read (``ps aux``). And SGLang 0.5.9
logs its whole ``ServerArgs`` at every start (``srt/entrypoints/engine.py:1031``,
``logger.info(f"{server_args=}")``), key included, into the journal.

What it does, in order:

1. Each ``--FLAG=ENVNAME`` before ``--`` names a flag and the environment variable holding
   its value (systemd loads it from the unit's 0600 ``EnvironmentFile=``). The variable is
   removed from the environment; an empty or unset one adds nothing.
2. When there is a secret, the process's stdout and stderr become pipes read by a filter
   process that writes every line to the original stream with each secret replaced by
   ``<redacted>``. The filter is a grandchild, so outside this process's tree; it ignores
   SIGTERM, SIGINT and SIGHUP (a unit stop signals the whole control group, and a server
   that drains after SIGTERM still logs) and ends when every writer has closed its end.
3. The entry point (``-m MODULE`` or a script path) runs in this process, which stays the
   unit's main PID, with ``FLAG VALUE`` appended to its arguments: the value exists only
   in this process's memory, never in an argv the kernel shows.
"""

import os
import re
import runpy
import select
import signal
import sys

REDACTED = b"<redacted>"
_SPEC = re.compile(r"^(--[A-Za-z0-9][A-Za-z0-9-]*)=([A-Za-z_][A-Za-z0-9_]*)$")
_CHUNK = 65536


def parse(argv):
    """``(secrets, target)``: ``[(flag, env name)]`` before ``--``, and what follows it."""
    if "--" not in argv:
        raise ValueError("usage: secret_exec.py --FLAG=ENVNAME ... -- (-m MODULE | SCRIPT) [ARG ...]")
    cut = argv.index("--")
    secrets = []
    for spec in argv[:cut]:
        match = _SPEC.match(spec)
        if not match:
            raise ValueError("secret_exec.py: %r is not --FLAG=ENVNAME" % spec)
        secrets.append((match.group(1), match.group(2)))
    target = argv[cut + 1:]
    if not target or (target[0] == "-m" and len(target) < 2):
        raise ValueError("secret_exec.py: nothing to run after --")
    return secrets, target


def take_secrets(secrets, environ):
    """``(extra argv, values)``: each set variable's flag and value; the variables removed."""
    extra, values = [], []
    for flag, name in secrets:
        value = environ.pop(name, "")
        if value:
            extra += [flag, value]
            values.append(value)
    return extra, values


class Redactor(object):
    """Replaces each secret in a byte stream fed in pieces; a secret split across two
    pieces is still found (the last ``longest - 1`` bytes wait for the next piece unless a
    line ends)."""

    def __init__(self, secrets):
        self.secrets = sorted(set(s.encode("utf-8") for s in secrets if s), key=len, reverse=True)
        self.keep = max([len(s) for s in self.secrets] or [1]) - 1
        self.pending = b""

    def _redact(self, data):
        for secret in self.secrets:
            data = data.replace(secret, REDACTED)
        return data

    def feed(self, data):
        """What can be written now."""
        data = self._redact(self.pending + data)
        cut = data.rfind(b"\n") + 1
        if cut == 0 and len(data) > self.keep:
            cut = len(data) - self.keep
        self.pending = data[cut:]
        return data[:cut]

    def flush(self):
        data, self.pending = self._redact(self.pending), b""
        return data


def _write_all(fd, data):
    while data:
        try:
            data = data[os.write(fd, data):]
        except OSError:
            return


def filter_streams(pairs, secrets):
    """Copy each ``(read fd, write fd)`` pair, redacted, until every read end is at EOF."""
    redactors = dict((r, (w, Redactor(secrets))) for r, w in pairs)
    while redactors:
        ready = select.select(list(redactors), [], [])[0]
        for fd in ready:
            out, redactor = redactors[fd]
            try:
                chunk = os.read(fd, _CHUNK)
            except OSError:
                chunk = b""
            if chunk:
                _write_all(out, redactor.feed(chunk))
            else:
                _write_all(out, redactor.flush())
                os.close(fd)
                del redactors[fd]


def start_filter(values):
    """Point fds 1 and 2 at pipes read by a forked filter (the child never returns)."""
    pairs, ends = [], []
    for fd in (1, 2):
        read_end, write_end = os.pipe()
        pairs.append((read_end, os.dup(fd)))
        ends.append((fd, write_end))
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        # a grandchild, so that it is nobody's child: SGLang ends with
        # kill_process_tree(include_parent=True), which SIGKILLs its children first and
        # would cut the last lines the filter has not written yet
        if os.fork() != 0:
            os._exit(0)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        for _fd, write_end in ends:
            os.close(write_end)
        try:
            filter_streams(pairs, values)
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    for read_end, original in pairs:
        os.close(read_end)
        os.close(original)
    for fd, write_end in ends:
        os.dup2(write_end, fd)
        os.close(write_end)


def main(argv=None):
    try:
        secrets, target = parse(list(sys.argv[1:] if argv is None else argv))
    except ValueError as exc:
        sys.stderr.write("%s\n" % exc)
        return 2
    extra, values = take_secrets(secrets, os.environ)
    if values:
        start_filter(values)
    # sys.path[0] as ``python -m`` (the working directory) or ``python SCRIPT`` would set
    # it, not this file's directory
    if target[0] == "-m":
        sys.path[0] = os.getcwd()
        sys.argv = [target[1]] + target[2:] + extra
        runpy.run_module(target[1], run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(target[0]))
        sys.argv = target + extra
        runpy.run_path(target[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
