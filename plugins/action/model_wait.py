# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Action plugin of gpufleet.sglang.model_wait: wait for a background model transfer and
show its progress (files, bytes, rate, ETA) on the controller every ``interval`` seconds."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json
import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.gpufleet.sglang.plugins.module_utils import _waiter

display = Display()
STATUS_EVERY = 2.0  # seconds between looks at the job while waiting for records or the copy


def finished(status):
    """The model wait's readiness predicate: async_status says the job ended (or failed
    before it could say so)."""
    return bool(status.get("finished") or status.get("failed") and "finished" not in status)


class ActionModule(ActionBase):
    """Poll async_status and the transfer's progress file until the job ends."""

    TRANSFERS_FILES = False

    _async_dir = None
    # the clock and the sleep of the polling loop, replaced by the unit tests
    _clock = staticmethod(time.monotonic)
    _sleep = staticmethod(time.sleep)

    def _status(self, jid, task_vars):
        # what the async_status action adds before it calls its module (the home directory
        # is asked of the host once, not at every poll)
        if self._async_dir is None:
            self._async_dir = self._remote_expand_user(
                self.get_shell_option("async_dir", default="~/.ansible_async"))
        return self._execute_module(module_name="ansible.builtin.async_status",
                                    module_args={"jid": jid, "_async_dir": self._async_dir},
                                    task_vars=task_vars)

    def _progress(self, path, task_vars):
        found = self._execute_module(module_name="ansible.builtin.slurp",
                                     module_args={"src": path}, task_vars=task_vars)
        if found.get("failed"):
            return None
        try:
            return json.loads(base64.b64decode(found["content"]))
        except (KeyError, ValueError):
            return None

    def _published(self, path, session, task_vars):
        found = self._execute_module(module_name="ansible.builtin.slurp",
                                     module_args={"src": path}, task_vars=task_vars)
        if found.get("failed"):
            return []
        records = []
        for line in base64.b64decode(found.get("content", "")).decode("utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line being written
            if entry.get("session") == session and entry.get("record"):
                records.append(entry["record"])
        return records

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        jid = args.get("jid")
        path = args.get("progress_path")
        interval = float(args.get("interval", 10))
        timeout = float(args.get("timeout", 86400))
        until = args.get("until", "finished")
        session = args.get("session")
        after = int(args.get("published_after", 0))
        total = int(args.get("published_total", 0))
        batch = float(args.get("published_batch", 1.0))
        host = task_vars.get("inventory_hostname")
        seen = {"last_line": 0.0, "first_new": None, "last_status": None}
        lines = []

        def poll():
            """One look: ("ended", status) when the job ended, ("answer", result) when what
            ``until`` waits for is there, None to look again. Waiting for published records
            or for the copy to be complete (the swarm's relay and stop, on its critical
            path) looks at the job only every STATUS_EVERY seconds (to see it fail); at the
            journal, or the progress file, at each poll."""
            now = self._clock()
            if until in ("published", "complete") and seen["last_status"] is not None \
                    and now - seen["last_status"] < STATUS_EVERY:
                status = {}
            else:
                status = self._status(jid, task_vars)
                seen["last_status"] = now
            if finished(status):
                if status.get("failed") or until == "finished":
                    return ("ended", status)
                # ended before what we wait for: its result says why
                return ("answer", dict(result, failed=True, progress=lines,
                                       msg="the transfer on %s ended: %s" % (host, status.get("msg"))))
            if until == "published":
                # new records are gathered for up to `batch` seconds (a burst of small files
                # makes one wave, not one per file); all of them at once when all are out
                records = self._published(args["published_path"], session, task_vars)
                if len(records) > after and seen["first_new"] is None:
                    seen["first_new"] = self._clock()
                if len(records) >= total or (seen["first_new"] is not None
                                             and self._clock() - seen["first_new"] >= batch):
                    return ("answer", dict(result, changed=False, progress=lines,
                                           published=records[after:], count=len(records),
                                           session=session, all_published=len(records) >= total))
            due = self._clock() - seen["last_line"] >= interval
            progress = self._progress(path, task_vars) if path and (
                due or until == "complete") else None
            if until == "complete" and progress and progress.get("session") == session \
                    and progress.get("complete"):
                return ("answer", dict(result, changed=False, progress=lines + [progress.get("line")]))
            if progress and due:
                seen["last_line"] = self._clock()
                line = "%s: %s" % (host, progress.get("line"))
                lines.append(line)
                display.display("model transfer " + line)
            return None

        done = _waiter.wait(poll, timeout=timeout,
                            interval=interval if until == "finished" else min(interval, 0.3),
                            clock=self._clock, sleep=self._sleep)
        if not done.ok:
            return dict(result, failed=True, progress=lines,
                        msg="the transfer on %s ran longer than %ds" % (host, timeout))
        kind, status = done.value
        if kind == "answer":
            return status
        status.pop("invocation", None)
        for key in ("ansible_job_id", "started", "finished", "results_file", "stdout",
                    "stderr", "erased"):
            status.pop(key, None)
        status["progress"] = lines
        result.update(status)
        return result
