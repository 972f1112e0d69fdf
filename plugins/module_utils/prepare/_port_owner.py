# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection.
"""Who holds a TCP port: our server, another process, or nobody.

Read straight from the kernel, without ``ss``: ``/proc/net/tcp`` and ``/proc/net/tcp6``
list the listening sockets with their inode; ``/proc/<pid>/fd/*`` links name the socket
inodes a process holds; ``/proc/<pid>/cgroup`` names the systemd unit of the process.

Without CAP_SYS_PTRACE (a container) root cannot read the fd table of another user's
process: then a listener with no visible process counts as ours when our unit is active
and our deployment record says it was deployed on that port.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

LISTEN = "0A"
_SOCKET = re.compile(r"^socket:\[(\d+)\]$")


def parse_proc_net_tcp(text):
    """``[(port, inode)]`` of the LISTEN sockets in a /proc/net/tcp{,6} table."""
    found = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or ":" not in fields[1]:
            continue
        if fields[3].upper() != LISTEN:
            continue
        try:
            port = int(fields[1].rsplit(":", 1)[1], 16)
        except ValueError:
            continue
        found.append((port, fields[9]))
    return found


def listening_inodes(port, tables):
    """The socket inodes listening on ``port`` in the given table texts."""
    inodes = set()
    for text in tables:
        for found_port, inode in parse_proc_net_tcp(text):
            if found_port == port:
                inodes.add(inode)
    return inodes


def unit_of(cgroup_text):
    """The systemd unit (``name.service``) in a /proc/<pid>/cgroup text, or None."""
    for line in cgroup_text.splitlines():
        path = line.split(":", 2)[-1]
        for part in reversed(path.split("/")):
            if part.endswith(".service") or part.endswith(".scope"):
                return part
    return None


def processes_holding(inodes, proc_root="/proc"):
    """``{pid: {"comm": name, "unit": unit}}`` of the processes whose fds hold these sockets.

    Processes whose fd table cannot be read are skipped: the caller learns that from an
    empty answer next to a non-empty listener set.
    """
    holders = {}
    if not inodes:
        return holders
    try:
        pids = [p for p in os.listdir(proc_root) if p.isdigit()]
    except OSError:
        return holders
    for pid in pids:
        fd_dir = os.path.join(proc_root, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            match = _SOCKET.match(target)
            if match and match.group(1) in inodes:
                holders[int(pid)] = {"comm": _read(os.path.join(proc_root, pid, "comm")).strip(),
                                     "unit": unit_of(_read(os.path.join(proc_root, pid, "cgroup")))}
                break
    return holders


def decide(port, inodes, holders, service, unit_active, record_port):
    """The verdict on ``port``: ``{"owner": "free"|"ours"|"other", "programs", "pids"}``.

    * nobody listens: free;
    * every process that holds the socket runs in our unit: ours;
    * no holder is visible (no CAP_SYS_PTRACE): ours when our unit is active and our
      deployment record names this port, else other (of unknown owner);
    * otherwise: other, with the programs and pids that hold it.
    """
    verdict = {"port": port, "owner": "free", "programs": [], "pids": []}
    if not inodes:
        return verdict
    unit = "%s.service" % service
    if holders:
        verdict["pids"] = sorted(holders)
        verdict["programs"] = sorted(set(h["comm"] for h in holders.values() if h["comm"]))
        ours = all(h["unit"] == unit for h in holders.values())
    else:
        ours = bool(unit_active) and record_port is not None and int(record_port) == int(port)
    verdict["owner"] = "ours" if ours else "other"
    return verdict


def message(verdict, host, service):
    """The refusal for a port held by another process."""
    port = verdict["port"]
    return ("server_port %d: port %d is already in use on %s by %s (pid %s), not by %s.service; "
            "stop it or choose another server_port."
            % (port, port, host, ", ".join(verdict["programs"]) or "a process of unknown owner",
               ", ".join(str(p) for p in verdict["pids"]) or "?", service))


def inspect(port, service, unit_active, record_port, proc_root="/proc"):
    """Read the kernel's tables and decide who holds ``port``."""
    tables = [_read(os.path.join(proc_root, "net", name)) for name in ("tcp", "tcp6")]
    inodes = listening_inodes(port, tables)
    holders = processes_holding(inodes, proc_root)
    return decide(port, inodes, holders, service, unit_active, record_port)


def _read(path):
    try:
        with open(path, "r") as handle:
            return handle.read()
    except (IOError, OSError):
        return ""
