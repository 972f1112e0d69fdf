# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Readiness semantics of SGLang's HTTP server, per release.

From the reference notes on SGLang's ``http_server.py`` (releases 0.4.6.post5 to 0.5.23):

* while the weights load nothing listens on the port (connection refused);
* once listening and until warmup ends, ``/health`` and ``/health_generate`` return 503
  (from 0.5.4.post3 on); ``/ready`` exists only from 0.5.23 on and returns 200 once the
  server is up;
* in 0.4.6.post5 ``/health`` is always 200 once listening, so only ``/health_generate``
  (which runs a one-token generation) tells readiness.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.sglang.plugins.module_utils.common._version import at_least, parse


def _release(text):
    """Check that ``text`` is an SGLang release; ValueError naming it otherwise."""
    try:
        parse(text)
    except ValueError:
        raise ValueError("cannot read an SGLang version from %r" % (text,))
    return text


def readiness_path(release):
    """The route that answers 200 only once the server can serve, for ``release``."""
    release = _release(release)
    if at_least(release, "0.5.23"):
        return "/ready"
    if at_least(release, "0.5.0"):
        return "/health"
    return "/health_generate"


def info_paths(release):
    """Routes that report the server's model and resolved arguments, for ``release``."""
    if at_least(_release(release), "0.5.9"):
        return {"model_info": "/model_info", "server_info": "/server_info"}
    return {"model_info": "/get_model_info", "server_info": "/get_server_info"}


def parse_unit_show(text):
    """Parse ``systemctl show -p A -p B`` output into a dict."""
    props = {}
    for line in (text or "").splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            props[key.strip()] = value.strip()
    return props


def unit_failure(props, baseline_restarts):
    """Return a reason string when the unit has failed or crashed since the wait began.

    ``baseline_restarts`` is the unit's NRestarts when the wait began: any increase means
    the server process died and systemd restarted it, which is a failed start too.
    """
    active = props.get("ActiveState", "")
    sub = props.get("SubState", "")
    result = props.get("Result", "")
    if active == "failed":
        return "unit entered the failed state (result: %s)" % (result or "unknown")
    if sub == "auto-restart":
        return "server process exited (result: %s) and systemd is about to restart it" % (
            result or "unknown"
        )
    if active == "inactive":
        return "unit is not running (inactive)"
    try:
        restarts = int(props.get("NRestarts", "0") or 0)
    except ValueError:
        restarts = 0
    if baseline_restarts is not None and restarts > baseline_restarts:
        return "server crashed and was restarted by systemd %d time(s) during the wait" % (
            restarts - baseline_restarts
        )
    return None
