# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Action plugin of gpufleet.sglang.model_wait: wait for a background model transfer and
show its progress (files, bytes, rate, ETA) on the controller every ``interval`` seconds."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.gpufleet.sglang.plugins.module_utils import _waiter

display = Display()


def finished(status):
    """The model wait's readiness predicate: async_status says the job ended (or failed
    before it could say so)."""
    return bool(status.get("finished") or status.get("failed") and "finished" not in status)


class ActionModule(ActionBase):
    """Poll async_status and the transfer's progress file until the job ends."""

    TRANSFERS_FILES = False

    def _status(self, jid, task_vars):
        # what the async_status action adds before it calls its module
        async_dir = self._remote_expand_user(
            self.get_shell_option("async_dir", default="~/.ansible_async"))
        return self._execute_module(module_name="ansible.builtin.async_status",
                                    module_args={"jid": jid, "_async_dir": async_dir},
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

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        jid = args.get("jid")
        path = args.get("progress_path")
        interval = float(args.get("interval", 10))
        timeout = float(args.get("timeout", 86400))
        host = task_vars.get("inventory_hostname")
        lines = []

        def poll():
            status = self._status(jid, task_vars)
            if not finished(status):
                progress = self._progress(path, task_vars) if path else None
                if progress:
                    line = "%s: %s" % (host, progress.get("line"))
                    lines.append(line)
                    display.display("model transfer " + line)
            return status

        done = _waiter.wait(poll, finished, timeout=timeout, interval=interval)
        if not done.ok:
            return dict(result, failed=True, progress=lines,
                        msg="the transfer on %s ran longer than %ds" % (host, timeout))
        status = done.value
        status.pop("invocation", None)
        for key in ("ansible_job_id", "started", "finished", "results_file", "stdout",
                    "stderr", "erased"):
            status.pop(key, None)
        status["progress"] = lines
        result.update(status)
        return result
