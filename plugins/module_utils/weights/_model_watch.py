# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The host's half of the model wait (``model_watch``): on the host, look at a background
transfer every :data:`POLL_S` seconds for at most one progress interval, and return as soon
as what the controller waits for is there.

The controller's loop (``action/model_wait.py``) used to run a module on the host at every
poll: async_status for the job, slurp for the progress file and the published journal, a
few times a second and per host. On a fleet of small machines those runs, not the links,
took the CPU while the swarm moved the bytes. Here one run looks many times, locally and
cheaply, and the controller runs one module per progress line, or one per answer.

What it looks at:

- the job: async_wrapper's results file (``<async_dir>/<jid>``), with async_status's own
  reading of it (:func:`job_ended`); when it has ended the controller asks async_status for
  the result;
- ``until=published``: the published journal's records of the session, gathered for up to
  ``batch`` seconds (a burst of small files makes one wave), or at once when all are out;
- ``until=complete``: the progress file says this session's copy is complete;
- ``until=finished``: only the job.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files, _waiter

POLL_S = 0.1  # seconds between looks on the host
UNTIL = ("finished", "published", "complete")


def job_ended(path):
    """Whether the async job written to ``path`` has ended, read as async_status reads it: a
    missing file ended (async_status says "could not find job"); a file that is not JSON yet
    is running; a result without ``started`` is the module's own, so it ended; otherwise the
    file's ``finished``."""
    if not os.path.exists(path):
        return True
    data = _files.read_json(path, None)
    if not isinstance(data, dict):
        return False
    if "started" not in data:
        return True
    return bool(data.get("finished"))


def session_records(path, session):
    return [line["record"] for line in _files.read_lines(path)
            if line.get("session") == session and line.get("record")]


def progress_of(path):
    data = _files.read_json(path, None) if path else None
    return data if isinstance(data, dict) else None


class Watch(object):
    """What one look saw, and whether the controller's wait has its answer (``answer()``).

    ``params``: ``until``, ``job_path``, ``progress_path``, ``session``, ``published_path``,
    ``published_after``, ``published_total``, ``published_batch``."""

    def __init__(self, params, clock=time.monotonic):
        self.p = params
        self.clock = clock
        self.first_new = None  # when records past ``published_after`` were first seen
        self.last = {}

    def look(self, flush=False):
        """One look; ``flush`` hands out the records gathered so far without waiting for
        the rest of the batch (the window is over)."""
        p = self.p
        seen = {"ended": job_ended(p["job_path"])}
        until = p["until"]
        if until == "published" and not seen["ended"]:
            records = session_records(p["published_path"], p["session"])
            after, total = int(p["published_after"]), int(p["published_total"])
            if len(records) > after and self.first_new is None:
                self.first_new = self.clock()
            all_out = len(records) >= total
            gathered = self.first_new is not None and (
                flush or self.clock() - self.first_new >= float(p["published_batch"]))
            if all_out or gathered:
                seen.update(published=records[after:], count=len(records),
                            all_published=all_out)
        if until == "complete" and not seen["ended"]:
            progress = progress_of(p["progress_path"])
            seen["complete"] = bool(progress and progress.get("session") == p["session"]
                                    and progress.get("complete"))
            seen["progress"] = progress
        self.last = seen
        return seen

    @staticmethod
    def answered(seen):
        return bool(seen["ended"] or "published" in seen or seen.get("complete"))


def watch(params, window, clock=time.monotonic, sleep=time.sleep):
    """Look until the wait has its answer or ``window`` seconds passed. Returns what the
    last look saw, with the progress (for the controller's line) and ``answered``. With an
    ``inbox``, the run touches it first: word from the controller for the swarm's lease
    (``_lease``)."""
    if params.get("until") not in UNTIL:
        raise ValueError("until must be one of %s, not %r" % (", ".join(UNTIL),
                                                              params.get("until")))
    if params.get("inbox"):
        _files.touch(params["inbox"])
    state = Watch(params, clock)
    done = _waiter.wait(state.look, ready=Watch.answered, timeout=max(0.0, float(window)),
                        interval=POLL_S, clock=clock, sleep=sleep)
    seen = dict(done.value or state.last)
    if not done.ok and state.first_new is not None:
        seen = dict(state.look(flush=True))  # records gathered when the window ended
    if "progress" not in seen:
        seen["progress"] = progress_of(params.get("progress_path"))
    seen["answered"] = Watch.answered(seen)
    seen["looks"] = done.polls
    return seen
