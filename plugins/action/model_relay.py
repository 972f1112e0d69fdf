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
  (``append``: a shell command through the connection's pipelining), until
  every record is handed out;
- for any other host (a holder, or a seed that is not the feeder): read the relay file
  the same way, handing nothing, until every record is out;
- with a ``lease``, a host that was handed nothing for a quarter of it has its inbox
  touched (``touch``), and each of the feeder's model_watch runs touches its
  own: the swarm on a host whose controller is gone ends on its own (``_lease``), and one
  whose controller lives hears from it while the relay runs;
- with ``remove``: the session's relay directory on the controller goes (after the swarm).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _waiter
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _lease, _relay
from ansible_collections.gpufleet.sglang.plugins.plugin_utils.model import HostWatch, append, touch

display = Display()

POLL_S = 0.1  # how often a peer's instance reads the relay file


class ActionModule(HostWatch, ActionBase):
    """One instance per host of the site; the feeder's and the peers' run at once (the
    feeder's watch and the peers' inbox: ``plugin_utils/model.py``)."""

    TRANSFERS_FILES = False

    def _swarm_add(self, inbox, session, records, task_vars):
        return append(self, inbox, session, records, task_vars=task_vars)

    def _swarm_touch(self, inbox, session, task_vars):
        return touch(self, inbox, session, task_vars=task_vars)

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
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
        if role in ("peer", "holder", "seed"):
            return self._hand_out(args, relay_file, result, task_vars, hand=role == "peer")
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
        watch_args = self._watch_args(args, "published", batch=0.2)
        out = {"count": 0, "batches": 0}  # what went into the relay file so far
        begun = self._clock()

        def look():
            """One run of model_watch on the host (the rest of this interval); a batch of
            records goes into the relay file at once."""
            left = timeout - (self._clock() - begun)
            seen = self._watch(dict(watch_args, published_after=out["count"],
                                    window=max(0.0, min(interval, left))), task_vars)
            if "published" in seen and not (seen.get("failed") or seen.get("ended")):
                _relay.append(relay_file, session, records=seen["published"])
                out["count"] = int(seen["count"])
                out["batches"] += 1
            return seen

        def over(seen):
            return bool(seen.get("failed") or seen.get("ended") or out["count"] >= total)

        def line(seen, _elapsed):
            progress = seen.get("progress") or {}
            if not seen.get("answered") and progress.get("line"):
                display.display("model transfer %s: %s" % (host, progress["line"]))

        if total <= 0:
            return dict(result, changed=False, published=0, batches=0)
        done = _waiter.wait(look, ready=over, timeout=timeout, interval=0.0, on_poll=line,
                            clock=self._clock, sleep=self._sleep)
        seen = done.value or {}
        if seen.get("failed"):
            return self._feeder_failed(relay_file, session, result,
                                       "watching the transfer on %s failed: %s"
                                       % (host, seen.get("msg")))
        if seen.get("ended"):
            status = self._status(args["jid"], task_vars)
            return self._feeder_failed(relay_file, session, result,
                                       "the transfer on %s ended after %d of %d files: %s"
                                       % (host, out["count"], total,
                                          status.get("msg") or "no message"))
        if not done.ok:
            return self._feeder_failed(relay_file, session, result,
                                       "the transfer on %s published %d of %d files in %ds"
                                       % (host, out["count"], total, timeout))
        return dict(result, changed=False, published=out["count"], batches=out["batches"])

    @staticmethod
    def _feeder_failed(relay_file, session, result, msg):
        _relay.append(relay_file, session, failed=msg)
        return dict(result, failed=True, msg=msg)

    # --- a peer's instance (and a holder's, which hands nothing) -----------------------
    def _hand_out(self, args, relay_file, result, task_vars, hand=True):
        session = args["session"]
        total = int(args["published_total"])
        timeout = float(args.get("timeout", 86400))
        keepalive = _lease.keepalive_every(args.get("lease"))
        host = task_vars.get("inventory_hostname")
        # relay lines read, records out, records handed, inbox appends, touches, last word
        out = {"seen": 0, "out": 0, "handed": 0, "batches": 0, "touches": 0,
               "word_at": self._clock()}

        def look():
            """Read the relay file's new lines and hand their records to the inbox (or
            touch it when nothing was handed for a quarter of the lease); what stops the
            instance (a failure here or the feeder's) comes back as ``error``."""
            try:
                records, failed, out["seen"] = _relay.read(relay_file, session, out["seen"])
            except (_relay.RelayError, OSError) as error:
                return {"error": "the relay on the controller: %s" % error}
            out["out"] += len(records)
            if records and hand:
                added = self._swarm_add(args["inbox"], session, records, task_vars)
                if added.get("failed"):
                    return {"error": "handing %d records to %s failed: %s"
                                     % (len(records), host, added.get("msg"))}
                out["handed"] += len(records)
                out["batches"] += 1
                out["word_at"] = self._clock()
            if failed:
                return {"error": "the site's feeder %s: %s" % (args["feeder"], failed)}
            if keepalive and out["out"] < total and self._clock() - out["word_at"] >= keepalive:
                touched = self._swarm_touch(args["inbox"], session, task_vars)
                if touched.get("failed"):
                    return {"error": "touching the inbox of %s failed: %s"
                                     % (host, touched.get("msg"))}
                out["touches"] += 1
                out["word_at"] = self._clock()
            return {}

        done = _waiter.wait(look, ready=lambda seen: bool(seen.get("error"))
                            or out["out"] >= total,
                            timeout=timeout, interval=POLL_S, clock=self._clock,
                            sleep=self._sleep)
        if done.value.get("error"):
            return dict(result, failed=True, handed=out["handed"], msg=done.value["error"])
        if not done.ok:
            return dict(result, failed=True, handed=out["handed"],
                        msg="%d of %d records from %s in %ds" % (
                            out["out"], total, args["feeder"], timeout))
        return dict(result, changed=False, handed=out["handed"], batches=out["batches"],
                    touches=out["touches"])
