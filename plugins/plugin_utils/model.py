# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""What the model step's action plugins share (controller only): no action plugin imports
another.

- :class:`HostWatch`, the look at a host's background transfer (model_watch, one progress
  interval per run, and async_status once for the job's result), for model_wait and
  model_relay's feeder;
- :func:`append` and :func:`touch`, a host's swarm inbox written with one shell command
  through the connection (or through the model_swarm module), for model_swarm and
  model_relay's peers.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _relay

MODULE = "gpufleet.sglang.model_swarm"


def finished(status):
    """The model wait's readiness predicate: async_status says the job ended (or failed
    before it could say so)."""
    return bool(status.get("finished") or status.get("failed") and "finished" not in status)


class HostWatch(object):
    """A mixin of an action plugin (before ``ActionBase``) that watches a host's background
    transfer: the job's directory, async_status, model_watch and its arguments, the clock."""

    _async_dir = None
    # the clock and the sleep of the loop, replaced by the unit tests
    _clock = staticmethod(time.monotonic)
    _sleep = staticmethod(time.sleep)

    def _job_dir(self):
        # what the async_status action adds before it calls its module (the home directory
        # is asked of the host once, not at every look)
        if self._async_dir is None:
            self._async_dir = self._remote_expand_user(
                self.get_shell_option("async_dir", default="~/.ansible_async"))
        return self._async_dir

    def _status(self, jid, task_vars):
        return self._execute_module(module_name="ansible.builtin.async_status",
                                    module_args={"jid": jid, "_async_dir": self._job_dir()},
                                    task_vars=task_vars)

    def _watch(self, module_args, task_vars):
        return self._execute_module(module_name="gpufleet.sglang.model_watch",
                                    module_args=module_args, task_vars=task_vars)

    def _watch_args(self, args, until, batch=1.0):
        """model_watch's arguments for the job ``args["jid"]`` (the window and, for the
        relay's feeder, ``published_after`` are set at each look)."""
        return {"job_path": os.path.join(self._job_dir(), str(args.get("jid"))), "until": until,
                "progress_path": args.get("progress_path"),
                "session": args.get("session"),
                "inbox": args.get("inbox"),
                "published_path": args.get("published_path"),
                "published_after": int(args.get("published_after", 0)),
                "published_total": int(args.get("published_total", 0)),
                "published_batch": float(args.get("published_batch", batch))}


# --- a host's swarm inbox ------------------------------------------------------------------

def _by_module(action, inbox):
    return action._play_context.check_mode or not str(inbox).startswith("/") \
        or not action._is_pipelining_enabled("new")


def _failed(what, inbox, res):
    return {"failed": True, "msg": "%s %s: rc %s: %s" % (
        what, inbox, res.get("rc"), (res.get("stderr") or res.get("stdout") or "").strip())}


def append(action, inbox, session, records=(), stop=False, task_vars=None):
    """Append to ``inbox`` on the action's host: {"changed": True} or a failed result. On
    a machine whose every core was busy, a module run per peer and batch reached the peers
    1-4 s after the seed verified the file; this command 0.3-1.6 s (8 hosts, bench-model)."""
    if _by_module(action, inbox):
        return action._execute_module(
            module_name=MODULE, module_args={"inbox": inbox, "session": session,
                                             "add": list(records), "stop": bool(stop)},
            task_vars=task_vars)
    res = action._low_level_execute_command(_relay.inbox_append_command(inbox), sudoable=True,
                                            in_data=_relay.inbox_lines(session, records, stop))
    if res.get("rc") != 0:
        return _failed("appending to", inbox, res)
    return {"changed": True, "added": len(records)}


def touch(action, inbox, session, task_vars=None):
    """Touch ``inbox`` on the action's host (word from the controller for the swarm's lease):
    {"changed": False, "added": 0} or a failed result."""
    if _by_module(action, inbox):
        out = action._execute_module(
            module_name=MODULE, module_args={"inbox": inbox, "session": session,
                                             "keepalive": True},
            task_vars=task_vars)
        return out if out.get("failed") else {"changed": False, "added": 0}
    res = action._low_level_execute_command(_relay.inbox_touch_command(inbox), sudoable=True)
    if res.get("rc") != 0:
        return _failed("touching", inbox, res)
    return {"changed": False, "added": 0}
