# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The collection's one waiter (plain Python, no Ansible imports), on the pattern of
kubernetes.core's ``k8s/waiter.py``: a polling loop with an injectable clock and sleep, and
readiness predicates that are pure functions of what one poll saw.

    result = wait(probe, ready, timeout=600, interval=1.0)
    result.ok, result.value, result.elapsed, result.polls

``probe()`` fetches the state (it may raise an exception listed in ``retry_on``, which
counts as a poll that saw nothing); ``ready(value)`` says whether it is done.
``on_poll(value, elapsed)`` is called after each poll (progress lines); it may raise to stop
the wait early (a failed unit, say).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time


class WaitResult(object):
    __slots__ = ("ok", "value", "elapsed", "polls", "error")

    def __init__(self, ok, value, elapsed, polls, error=None):
        self.ok = ok
        self.value = value
        self.elapsed = elapsed
        self.polls = polls
        self.error = error

    def __repr__(self):
        return "WaitResult(ok=%r, elapsed=%r, polls=%r)" % (self.ok, self.elapsed, self.polls)


def truthy(value):
    """The default predicate: any truthy value is ready."""
    return bool(value)


def wait(probe, ready=truthy, timeout=60.0, interval=1.0, retry_on=(), on_poll=None,
         clock=time.monotonic, sleep=time.sleep):
    """Poll until ``ready(probe())`` or ``timeout`` seconds. Never sleeps past the deadline;
    always polls at least once."""
    start = clock()
    polls = 0
    value = None
    error = None
    while True:
        polls += 1
        try:
            value = probe()
            error = None
            done = ready(value)
        except retry_on as exc:  # pylint: disable=catching-non-exception
            value, error, done = None, exc, False
        elapsed = clock() - start
        if on_poll is not None:
            on_poll(value, elapsed)
        if done:
            return WaitResult(True, value, round(elapsed, 3), polls)
        if elapsed >= timeout:
            return WaitResult(False, value, round(elapsed, 3), polls, error)
        sleep(max(0.0, min(interval, timeout - elapsed)))
