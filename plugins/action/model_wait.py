# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Action plugin of gpufleet.sglang.model_wait: wait for a background model transfer and
show its progress (files, bytes, rate, ETA) on the controller every ``interval`` seconds.

The looking is done on the host by gpufleet.sglang.model_watch (``_model_watch``), one
progress interval per run: it returns as soon as the job ended or what ``until`` waits for is
there. The controller runs one module per progress line or answer, and async_status once,
for the job's result, when the job ended."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _waiter
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _lease
from ansible_collections.gpufleet.sglang.plugins.plugin_utils.model import HostWatch, finished

display = Display()


class ActionModule(HostWatch, ActionBase):
    """Watch the transfer on the host, one interval at a time, until the job ends or what
    ``until`` waits for is there (the watch itself: ``plugin_utils/model.py``)."""

    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        jid = args.get("jid")
        interval = float(args.get("interval", 10))
        timeout = float(args.get("timeout", 86400))
        until = args.get("until", "finished")
        host = task_vars.get("inventory_hostname")
        watch_args = self._watch_args(args, until)
        lines = []
        begun = self._clock()
        # a wave of the model role returns at least this often, so that the play touches
        # every host's inbox in between (the swarm's lease)
        keepalive = _lease.keepalive_every(args.get("lease")) if until == "published" else 0.0
        stop_after = min(timeout, keepalive) if keepalive else timeout

        def look():
            """One run of model_watch on the host, for the rest of this interval."""
            left = stop_after - (self._clock() - begun)
            return self._watch(dict(watch_args, window=max(0.0, min(interval, left))),
                               task_vars)

        def answered(seen):
            return bool(seen.get("failed") or seen.get("answered"))

        def line(seen, _elapsed):
            progress = seen.get("progress") or {}
            if not answered(seen) and progress.get("line"):
                text = "%s: %s" % (host, progress["line"])
                lines.append(text)
                display.display("model transfer " + text)

        done = _waiter.wait(look, ready=answered, timeout=stop_after, interval=0.0,
                            on_poll=line, clock=self._clock, sleep=self._sleep)
        if not done.ok and stop_after < timeout:
            # no new record within a quarter of the lease: an empty wave
            after = int(args.get("published_after", 0))
            return dict(result, changed=False, progress=lines, published=[], count=after,
                        session=args.get("session"),
                        all_published=after >= int(args.get("published_total", 0)))
        if not done.ok:
            return dict(result, failed=True, progress=lines,
                        msg="the transfer on %s ran longer than %ds" % (host, timeout))
        seen = done.value
        if seen.get("failed"):
            return dict(result, failed=True, progress=lines,
                        msg="watching the transfer on %s failed: %s" % (host, seen.get("msg")))
        if not seen.get("ended"):
            if until == "published":
                return dict(result, changed=False, progress=lines,
                            published=seen["published"], count=seen["count"],
                            session=args.get("session"), all_published=seen["all_published"])
            progress = seen.get("progress") or {}
            return dict(result, changed=False, progress=lines + [progress.get("line")])
        status = self._status(jid, task_vars)
        if not finished(status):
            # the watch found no job file where async_status keeps it, but async_status
            # says the job still runs: never taken for the job's result
            return dict(result, failed=True, progress=lines,
                        msg="the transfer on %s: no job file at %s, but async_status says "
                            "job %s still runs" % (host, watch_args["job_path"], jid))
        if until != "finished" and not status.get("failed"):
            # ended before what we wait for: its result says why
            return dict(result, failed=True, progress=lines,
                        msg="the transfer on %s ended: %s" % (host, status.get("msg")))
        status.pop("invocation", None)
        for key in ("ansible_job_id", "started", "finished", "results_file", "stdout",
                    "stderr", "erased"):
            status.pop(key, None)
        status["progress"] = lines
        result.update(status)
        return result
