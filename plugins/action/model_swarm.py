# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Action plugin of gpufleet.sglang.model_swarm: append the records or the stop to a host's
swarm inbox with one shell command fed through the connection's pipelining (no Python
start on the host), or through the module where the connection does not pipeline, in check
mode, or for an inbox path the shell should not be given (not absolute). The relay
(model_relay) hands its batches out the same way (:func:`append`), and touches the inbox of
a host it has nothing to hand the same way too (:func:`touch`, the swarm's lease)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _relay

MODULE = "gpufleet.sglang.model_swarm"


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


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        spec = {"inbox": {"type": "str", "required": True},
                "session": {"type": "str", "required": True},
                "add": {"type": "list", "elements": "dict", "default": []},
                "stop": {"type": "bool", "default": False},
                "keepalive": {"type": "bool", "default": False}}
        _validation, args = self.validate_argument_spec(argument_spec=spec)
        if not (args["add"] or args["stop"]):
            if args["keepalive"]:
                result.update(touch(self, args["inbox"], args["session"], task_vars))
                return result
            return dict(result, changed=False, added=0)
        out = append(self, args["inbox"], args["session"], args["add"], args["stop"],
                     task_vars)
        result.update(out)
        return result
