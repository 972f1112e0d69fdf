# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""The collection's one command runner.

Every module runs its host commands through :func:`run`: one place decides the timeout
wrapper, the working directory, the environment and how a failure is reported. A failed
command is reported with one uniform payload (:func:`failure_payload`): ``msg``, ``cmd``,
``rc``, ``stdout``, ``stderr`` and ``timed_out``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

# rc of coreutils' timeout(1): 124 when the command ran out of time, 137 when it also
# had to be killed after --kill-after.
TIMEOUT_RCS = (124, 137)


class CommandResult(object):
    """What one command did."""

    __slots__ = ("cmd", "rc", "stdout", "stderr", "elapsed", "timed_out")

    def __init__(self, cmd, rc, stdout, stderr, elapsed=0.0, timed_out=False):
        self.cmd = list(cmd)
        self.rc = rc
        self.stdout = stdout or ""
        self.stderr = stderr or ""
        self.elapsed = elapsed
        self.timed_out = timed_out

    @property
    def ok(self):
        return self.rc == 0

    def last_line(self, stream="stderr", pattern=None):
        """The last non-empty line of a stream (containing ``pattern`` when given)."""
        text = self.stderr if stream == "stderr" else self.stdout
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if pattern is not None:
            lines = [ln for ln in lines if pattern in ln]
        return lines[-1] if lines else ""


def with_timeout(timeout_bin, argv, seconds, kill_after=10):
    """argv wrapped in ``timeout --kill-after=K SECONDS`` when a timeout binary and a bound exist."""
    if timeout_bin and seconds and seconds > 0:
        return [timeout_bin, "--kill-after=%d" % kill_after, str(int(seconds))] + list(argv)
    return list(argv)


def run(module, argv, timeout=None, env=None, cwd="/", data=None):
    """Run ``argv`` on the host (never through a shell) and return a :class:`CommandResult`."""
    timeout_bin = module.get_bin_path("timeout") if timeout else None
    cmd = with_timeout(timeout_bin, argv, timeout)
    started = time.time()
    rc, out, err = module.run_command(cmd, environ_update=env or {}, cwd=cwd, data=data,
                                      binary_data=data is not None)
    elapsed = time.time() - started
    timed_out = bool(timeout_bin) and cmd[0] == timeout_bin and rc in TIMEOUT_RCS
    return CommandResult(cmd, rc, out, err, elapsed=round(elapsed, 3), timed_out=timed_out)


def failure_payload(msg, result, **extra):
    """The uniform failure payload of a failed command."""
    payload = dict(msg=msg, cmd=result.cmd, rc=result.rc, stdout=result.stdout,
                   stderr=result.stderr, timed_out=result.timed_out)
    payload.update(extra)
    return payload


def fail(module, msg, result, **extra):
    """Fail the module with the uniform payload of ``result``."""
    module.fail_json(**failure_payload(msg, result, **extra))
