# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The swarm's lease: a host's part in the model step's swarm ends on its own once, for
``seconds``, the controller has not been heard from and no byte has moved.

The swarm runs in an async job that the controller ends with a stop in the host's inbox
(``roles/model/tasks/swarm.yml``). A controller that dies first (killed, its machine or its
connection lost) never sends the stop: without a lease the engine kept its port open and
its files in use until the transfer's deadline (``model_transfer_timeout``, a day by
default).

What counts:

- **word from the controller**: the inbox changed (its size or its mtime). Every contact the
  controller makes with a swarm host goes there: the records and the stop are appended,
  each model_watch run (the progress and the feeder's records) touches it, and while the
  relay or the waves run, every host that has nothing handed to it is touched every
  ``seconds / 4`` (:func:`keepalive_every`);
- **movement**: the engine's payload bytes, sent or received, or this host's bytes done
  (the seed's download included) changed.

Movement keeps a host whose controller is gone only as long as the host is of use: a seed
finishing its download, a peer finishing what it was handed, a holder serving them. A host
that holds every file and is idle ends as if stopped (its copy placed); one that does not
ends failed, with what it holds kept for the next run.

Plain Python, no Ansible imports; the clock is the caller's (``now``)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

KEEPALIVES_PER_LEASE = 4
# a lease shorter than this many progress intervals could end a host between two looks
INTERVALS_PER_LEASE = 3
_UNSEEN = object()


def checked(lease, interval):
    """``model_swarm_lease`` as seconds (0: no lease), or ValueError naming the variable,
    its value and what was expected: 0, or at least INTERVALS_PER_LEASE progress intervals
    (a host waiting on the controller hears from it once an interval)."""
    try:
        seconds = float(lease)
        every = float(interval)
    except (TypeError, ValueError):
        raise ValueError("model_swarm_lease is %r: expected seconds (0 for no lease)" % (lease,))
    if seconds < 0 or 0 < seconds < INTERVALS_PER_LEASE * every:
        raise ValueError("model_swarm_lease is %r: expected 0 (no lease) or at least %d x "
                         "model_progress_interval (%g s) = %g s" % (
                             lease, INTERVALS_PER_LEASE, every, INTERVALS_PER_LEASE * every))
    return seconds


def keepalive_every(seconds):
    """How often the controller touches a host it has nothing to hand (0: never, the lease
    is off)."""
    seconds = float(seconds or 0)
    return seconds / KEEPALIVES_PER_LEASE if seconds > 0 else 0.0


class Lease(object):
    """The lease of one host's swarm. ``look(now, word, moved)`` at every turn of the loop,
    with the inbox's mark (``(size, mtime_ns)`` or None) and the movement's mark (any value
    that changes when bytes move); ``expired(now)`` says whether the host should end."""

    def __init__(self, seconds, now):
        self.seconds = float(seconds or 0)
        self.heard_at = now
        self.moved_at = now
        self.word = _UNSEEN  # the first look takes the marks as they are
        self.moved = _UNSEEN
        self.words = 0  # how many changes of the inbox the host saw

    def look(self, now, word, moved):
        if self.word is _UNSEEN:
            self.word, self.moved = word, moved
            return
        if word != self.word:
            self.heard_at = now
            self.words += 1
            self.word = word
        if moved != self.moved:
            self.moved_at = now
            self.moved = moved

    def expired(self, now):
        return self.seconds > 0 and now - max(self.heard_at, self.moved_at) > self.seconds

    def report(self, now):
        """What the lease saw, for the host's result."""
        return {"lease_s": self.seconds, "silent_s": round(now - self.heard_at, 3),
                "idle_s": round(now - self.moved_at, 3), "words": self.words}

    def message(self, now):
        return ("no word from the controller for %.0f s and no byte moved for %.0f s (lease "
                "%.0f s, model_swarm_lease): the swarm ended on its own; was the controller's "
                "run stopped before its stop?" % (now - self.heard_at, now - self.moved_at,
                                                  self.seconds))
