# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Action plugin of gpufleet.sglang.model_swarm: append the records or the stop to a host's
swarm inbox with one shell command fed through the connection's pipelining (no Python
start on the host), or through the module where the connection does not pipeline, in check
mode, or for an inbox path the shell should not be given (not absolute). The relay
(model_relay) hands its batches out the same way, and touches the inbox of a host it has
nothing to hand the same way too (the swarm's lease): ``append`` and ``touch`` of
``plugin_utils/model.py``."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.sglang.plugins.plugin_utils.model import append, touch


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
