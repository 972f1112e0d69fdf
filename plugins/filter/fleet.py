# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Filters that read one variable across the fleet's hosts, in place of Jinja chains over
``hostvars`` (``map('extract', hostvars) | selectattr(...)``) in task files."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

_MISSING = object()
TESTS = ("defined", "truthy", "falsy")


def _lookup(hostvars, host, path):
    """The value at dotted ``path`` in ``host``'s variables, or _MISSING."""
    try:
        value = hostvars[host]
    except KeyError:
        return _MISSING
    for key in path.split("."):
        try:
            value = value[key]
        except (KeyError, TypeError, IndexError):
            return _MISSING
        if value is None and key != path.split(".")[-1]:
            return _MISSING
    return value


def hosts_with(hosts, hostvars, path, test="defined"):
    """The hosts (in order) whose variable ``path`` (dotted) is defined, or defined and
    truthy (``truthy``), or defined and falsy (``falsy``)."""
    if test not in TESTS:
        raise AnsibleFilterError("hosts_with: test must be one of %s (got %r)" % (", ".join(TESTS), test))
    out = []
    for host in hosts:
        value = _lookup(hostvars, host, path)
        if value is _MISSING:
            continue
        if test == "defined" or (test == "truthy") == bool(value):
            out.append(host)
    return out


def hostvar_values(hosts, hostvars, path):
    """The values of ``path`` (dotted) of the hosts that define it, in host order."""
    return [v for v in (_lookup(hostvars, h, path) for h in hosts) if v is not _MISSING]


class FilterModule(object):
    """gpufleet.sglang fleet filters."""

    def filters(self):
        return {"hosts_with": hosts_with, "hostvar_values": hostvar_values}
