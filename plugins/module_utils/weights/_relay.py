# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The swarm's relay on the controller: the seed's piece hashes, handed to the peers while
the hosts run (``gpufleet.sglang.model_relay``), in one task instead of a wave of tasks per
batch of files.

The feeder's instance of the task (on the controller, for the site's feeder host) watches the
feeder's published journal and appends each batch of records to the site's relay file; each
peer's instance (for a peer host, at the same time) reads the lines it has not handed out yet
and appends them to its host's inbox. The relay file is the controller's: a directory of the
step's session, private to the controller's user (0700, checked before a peer reads), one
JSON-lines file per feeder.

The instances of one task run at the same time only when ``forks`` covers every host of the
play (:func:`fits`); otherwise the plan keeps the waves (``wave.yml``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os
import shutil
import stat
import tempfile

try:
    from shlex import quote
except ImportError:  # pragma: no cover - Python 2
    from pipes import quote

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files


class RelayError(Exception):
    """The relay cannot be trusted or read (a directory that is not the controller user's
    own, or that others can write)."""


def fits(hosts, forks):
    """Whether one task's instances for ``hosts`` all run at once with ``forks`` workers
    (a peer's instance waits for the feeder's: a feeder queued behind waiting peers would
    leave them waiting until their timeout)."""
    try:
        forks = int(forks)
    except (TypeError, ValueError):
        return False
    return forks >= len(hosts) > 0


def directory(session, base=None):
    """The session's relay directory on the controller (not created here)."""
    return os.path.join(base or tempfile.gettempdir(), "gpufleet-relay-%s" % session)


def path(relay_dir, feeder):
    """The relay file of one feeder (a site) in the session's directory."""
    return os.path.join(relay_dir, "%s.jsonl" % str(feeder).replace(os.sep, "_"))


def private(relay_dir):
    """Raise RelayError unless ``relay_dir`` is a directory of this user that nobody else
    can write or read (records are trusted as the seed's: nobody else may add one)."""
    info = os.lstat(relay_dir)
    if not stat.S_ISDIR(info.st_mode):
        raise RelayError("%s is not a directory" % relay_dir)
    if info.st_uid != os.getuid():
        raise RelayError("%s belongs to uid %d, not to the controller's user (uid %d)"
                         % (relay_dir, info.st_uid, os.getuid()))
    if info.st_mode & 0o077:
        raise RelayError("%s is open to other users (mode %04o): the relay needs 0700"
                         % (relay_dir, stat.S_IMODE(info.st_mode)))


def create(relay_dir):
    """The feeder's side: make the session's directory (0700), or use the one another
    feeder of the same session made; refuse one that is not private."""
    try:
        os.mkdir(relay_dir, 0o700)
    except OSError as error:
        if error.errno != errno.EEXIST:
            raise
    private(relay_dir)


def append(relay_file, session, records=None, failed=None):
    """One line for the peers: a batch of records, or the feeder's failure."""
    line = {"session": session}
    if records:
        line["add"] = list(records)
    if failed:
        line["failed"] = str(failed)
    _files.append_line(relay_file, line, mode=0o600)


def read(relay_file, session, seen):
    """The lines of ``session`` after the first ``seen`` ones: (records, failure or None,
    lines of the session so far). A file not there yet reads as nothing."""
    if not os.path.exists(relay_file):
        return [], None, seen
    private(os.path.dirname(relay_file))
    lines = [line for line in _files.read_lines(relay_file) if line.get("session") == session]
    records, failed = [], None
    for line in lines[seen:]:
        records.extend(line.get("add") or [])
        if line.get("failed"):
            failed = line["failed"]
    return records, failed, len(lines)


def inbox_lines(session, records=(), stop=False):
    """The inbox lines for ``records`` (one line a record) and the stop, as the model_swarm
    module writes them."""
    lines = [{"session": session, "add": [rec]} for rec in records]
    if stop:
        lines.append({"session": session, "stop": True})
    return "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines)


def inbox_append_command(inbox):
    """A shell command that appends its standard input to ``inbox``: what a peer's instance
    runs over the host's connection (its pipelining) instead of a module, so that handing a
    batch to eight hosts costs no Python start on any of them. Like ``_files.append_line``,
    it starts on a new line after a torn last line (a writer killed mid-line); the reader
    skips a line it cannot parse and reads the inbox again once it grew."""
    path = quote(inbox)
    folder = quote(os.path.dirname(inbox) or "/")
    return ("umask 022 && mkdir -p %s && { if [ -s %s ] && [ -n \"$(tail -c 1 %s)\" ]; "
            "then printf '\\n'; fi; cat; } >> %s" % (folder, path, path, path))


def inbox_touch_command(inbox):
    """A shell command that creates ``inbox`` if it is missing and sets its mtime to now:
    word from the controller for a host it has nothing to hand (the swarm's lease,
    ``_lease``), as ``_files.touch`` does."""
    path = quote(inbox)
    folder = quote(os.path.dirname(inbox) or "/")
    return "umask 022 && mkdir -p %s && touch %s" % (folder, path)


def remove(relay_dir):
    """Remove the session's directory once the relay is over (True when it was there);
    one that is not private is left alone (RelayError)."""
    if not os.path.lexists(relay_dir):
        return False
    private(relay_dir)
    shutil.rmtree(relay_dir)
    return True
