# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Action plugin of gpufleet.sglang.model_relay: hand the seed's piece hashes to the site's
peers as the seed publishes them, in one task while the hosts run (``weights/_relay.py``).

- for the site's feeder: watch its published journal on the host (model_watch, as the
  model wait does) and append each batch of records to the site's relay file on the
  controller, until every record is out; a failed or ended transfer is written there too,
  so that the peers stop with its message;
- for a peer: read the relay file's new lines and hand their records to the host's inbox
  (model_swarm), until every record is handed out;
- for any other host (a holder): nothing;
- with ``remove``: the session's relay directory on the controller goes (after the swarm).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.utils.display import Display
from ansible_collections.gpufleet.sglang.plugins.action import model_wait
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _relay

display = Display()

POLL_S = 0.1  # how often a peer's instance reads the relay file


class ActionModule(model_wait.ActionModule):
    """One instance per host of the site; the feeder's and the peers' run at once."""

    TRANSFERS_FILES = False

    def _swarm_add(self, inbox, session, records, task_vars):
        return self._execute_module(module_name="gpufleet.sglang.model_swarm",
                                    module_args={"inbox": inbox, "session": session,
                                                 "add": records},
                                    task_vars=task_vars)

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(model_wait.ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        if args.get("remove"):
            try:
                removed = _relay.remove(args["relay_dir"])
            except (_relay.RelayError, OSError) as error:
                return dict(result, failed=True, msg="the relay on the controller: %s" % error)
            return dict(result, changed=removed)
        role = args.get("role")
        relay_file = _relay.path(args["relay_dir"], args["feeder"])
        if role == "feeder":
            return self._feed(args, relay_file, result, task_vars)
        if role == "peer":
            return self._hand_out(args, relay_file, result, task_vars)
        if role in ("holder", "seed"):
            return dict(result, changed=False, handed=0, msg="nothing to relay (%s)" % role)
        return dict(result, failed=True,
                    msg="role is %r: expected feeder, peer, holder or seed" % (role,))

    # --- the feeder's instance -------------------------------------------------------
    def _feed(self, args, relay_file, result, task_vars):
        host = task_vars.get("inventory_hostname")
        session = args["session"]
        total = int(args["published_total"])
        interval = float(args.get("interval", 10))
        timeout = float(args.get("timeout", 86400))
        _relay.create(args["relay_dir"])
        watch_args = {"job_path": "%s/%s" % (self._job_dir(), args["jid"]),
                      "until": "published", "progress_path": args.get("progress_path"),
                      "session": session, "published_path": args.get("published_path"),
                      "published_total": total,
                      "published_batch": float(args.get("published_batch", 0.2))}
        begun = self._clock()
        count, batches = 0, 0
        while count < total:
            left = timeout - (self._clock() - begun)
            if left <= 0:
                return self._feeder_failed(relay_file, session, result,
                                           "the transfer on %s published %d of %d files in "
                                           "%ds" % (host, count, total, timeout))
            seen = self._watch(dict(watch_args, published_after=count,
                                    window=max(0.0, min(interval, left))), task_vars)
            if seen.get("failed"):
                return self._feeder_failed(relay_file, session, result,
                                           "watching the transfer on %s failed: %s"
                                           % (host, seen.get("msg")))
            if seen.get("ended"):
                status = self._status(args["jid"], task_vars)
                return self._feeder_failed(relay_file, session, result,
                                           "the transfer on %s ended after %d of %d files: %s"
                                           % (host, count, total,
                                              status.get("msg") or "no message"))
            if "published" in seen:
                records = seen["published"]
                _relay.append(relay_file, session, records=records)
                count = int(seen["count"])
                batches += 1
                continue
            progress = seen.get("progress") or {}
            if progress.get("line"):
                display.display("model transfer %s: %s" % (host, progress["line"]))
        return dict(result, changed=False, published=count, batches=batches)

    @staticmethod
    def _feeder_failed(relay_file, session, result, msg):
        _relay.append(relay_file, session, failed=msg)
        return dict(result, failed=True, msg=msg)

    # --- a peer's instance -----------------------------------------------------------
    def _hand_out(self, args, relay_file, result, task_vars):
        session = args["session"]
        total = int(args["published_total"])
        timeout = float(args.get("timeout", 86400))
        begun = self._clock()
        seen, handed, batches = 0, 0, 0
        while handed < total:
            try:
                records, failed, seen = _relay.read(relay_file, session, seen)
            except (_relay.RelayError, OSError) as error:
                return dict(result, failed=True, msg="the relay on the controller: %s" % error)
            if records:
                added = self._swarm_add(args["inbox"], session, records, task_vars)
                if added.get("failed"):
                    return dict(result, failed=True, handed=handed,
                                msg="handing %d records to %s failed: %s"
                                    % (len(records), task_vars.get("inventory_hostname"),
                                       added.get("msg")))
                handed += len(records)
                batches += 1
            if failed:
                return dict(result, failed=True, handed=handed,
                            msg="the site's feeder %s: %s" % (args["feeder"], failed))
            if records:
                continue
            if self._clock() - begun > timeout:
                return dict(result, failed=True, handed=handed,
                            msg="%d of %d records from %s in %ds" % (
                                handed, total, args["feeder"], timeout))
            self._sleep(POLL_S)
        return dict(result, changed=False, handed=handed, batches=batches)
