# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Action plugin of gpufleet.sglang.model_plan: the fan-out plan from the play's hosts'
facts, on the controller (``_fanout.fleet_inputs`` and ``_fanout.plan``)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import uuid

from ansible import constants as C
from ansible import context
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _fanout, _lease, _relay


def forks():
    """The run's forks (the command line's, else the configuration's)."""
    return context.CLIARGS.get("forks") or C.DEFAULT_FORKS


class ActionModule(ActionBase):
    """Who downloads, who swarms with whom, which hosts fall back to rsync rounds."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        engine_name = args.get("engine", "libtorrent")
        problems = []
        if engine_name not in ("libtorrent", "rsync"):
            problems.append("model_engine is %r: expected libtorrent or rsync" % (engine_name,))
        try:
            lease = _lease.checked(args.get("lease", 0), args.get("interval", 10))
        except ValueError as error:
            problems.append(str(error))
        if problems:
            return dict(result, failed=True, msg="; ".join(problems))
        play_hosts = task_vars.get("ansible_play_hosts") or []
        hostvars = task_vars.get("hostvars") or {}
        hosts, verified, seeds, engine, addresses = _fanout.fleet_inputs(play_hosts, hostvars)
        if engine_name == "rsync":
            engine = []
        try:
            plan = _fanout.plan(hosts, verified, seeds, engine if engine_name != "rsync" else None,
                                addresses)
        except ValueError as error:
            return dict(result, failed=True, msg=str(error))
        manifest = args.get("manifest") or []
        plan["session"] = uuid.uuid4().hex
        plan["published_total"] = len([e for e in manifest if int(e.get("size", 0)) > 0])
        # the relay hands the records out in one task while the hosts run, when every host's
        # instance of it gets a worker at once; otherwise the waves (wave.yml) do
        plan["relay"] = bool(plan["swarm"]) and _relay.fits(hosts, forks())
        plan["relay_dir"] = _relay.directory(plan["session"])
        plan["lease"] = lease
        result.update(changed=False, plan=plan)
        if plan["fallback"]:
            result["msg"] = ("the swarm engine (libtorrent) is not installed on %s: %s get "
                             "the model in rsync rounds instead"
                             % (", ".join(plan["fallback"]),
                                "it gets" if len(plan["fallback"]) == 1 else "they get"))
        return result
