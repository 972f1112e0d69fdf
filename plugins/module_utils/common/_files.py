# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The collection's one file helper (plain Python, no Ansible imports).

* :func:`write_atomic`: a temporary file in the target's directory, fsync, chmod, rename,
  and an fsync of the directory, so a reader sees the old file or the new one, never half.
* :func:`read_json` / :func:`write_json`: JSON documents (sorted keys, newline at the end).
* :func:`append_line`: one JSON line appended and fsynced (journals).
* :func:`digest`: sha256 (or any hashlib name) of a file, read once in blocks; the
  git blob sha1 with ``algorithm="git-sha1"``. :func:`hasher` is the hash object it
  starts from, for bytes that are hashed as they stream by.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import tempfile

CHUNK = 1 << 20
SHA256 = "sha256"
GIT_SHA1 = "git-sha1"


def write_atomic(path, data, mode=0o644, owner=None, prefix=None, before_rename=None):
    """Write ``data`` (bytes or text) to ``path`` atomically. ``owner`` is an optional
    ``(uid, gid)``; ``prefix`` names the temporary file (default ``.<name>.``);
    ``before_rename(tmp)`` runs on the finished temporary file just before the rename (a
    module sets ownership by name or an SELinux context there). Returns ``path``."""
    if not isinstance(data, bytes):
        data = data.encode("utf-8")
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=directory,
                               prefix=prefix or ".%s." % os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            if owner is not None:
                os.fchown(handle.fileno(), owner[0], owner[1])
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if before_rename is not None:
            before_rename(tmp)
        os.rename(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return path
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
    return path


def dumps(data):
    """The collection's JSON rendering: indented, sorted keys, a newline at the end."""
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def write_json(path, data, mode=0o644, owner=None, makedirs=False):
    """Write ``data`` as JSON, atomically; ``makedirs`` creates a missing directory (0755)."""
    if makedirs:
        directory = os.path.dirname(path)
        if directory and not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
    return write_atomic(path, dumps(data), mode=mode, owner=owner)


def load_json(path):
    """The document at ``path`` (UTF-8); raises ``OSError`` when it cannot be read and
    ``ValueError`` when it is not JSON (a caller that names the reason in its refusal)."""
    with open(path, "rb") as handle:
        return json.loads(handle.read().decode("utf-8"))


def read_json(path, default=None):
    """The document at ``path``, or ``default`` when it is missing or not JSON."""
    try:
        return load_json(path)
    except (OSError, ValueError):
        return default


def append_line(path, record, mode=0o644):
    """Append ``record`` as one JSON line and fsync (a journal survives a kill: at most the
    last line is torn, :func:`read_lines` skips a torn line, and the next append starts
    on a new line after it)."""
    line = json.dumps(record, sort_keys=True) + "\n"
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, mode)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            # a torn last line (a kill mid-append): start on a line of our own, so that
            # this record is not glued to the torn one and lost with it
            line = "\n" + line
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def touch(path, mode=0o644):
    """Create ``path`` if it is missing and set its mtime to now (the swarm's inbox: word
    from the controller for the swarm's lease)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        os.utime(fd)
    finally:
        os.close(fd)


def read_lines(path):
    """Every whole JSON line of ``path`` ([] when missing); a torn or foreign line is
    skipped."""
    out = []
    try:
        with open(path) as handle:
            for line in handle:
                line = line.strip()
                if not line:
                    continue
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        return []
    return out


def hasher(algorithm, size):
    """A fresh hash object for ``algorithm``: any hashlib name, or ``git-sha1`` (sha1 that
    has already taken git's blob header ``blob <size>\\0``, so that the content of ``size``
    bytes fed to it gives the git blob id)."""
    if algorithm == GIT_SHA1:
        hash_object = hashlib.sha1()
        hash_object.update(b"blob %d\0" % size)
        return hash_object
    return hashlib.new(algorithm)


def digest(path, algorithm="sha256", size=None):
    """Hex digest of the file at ``path``: any hashlib algorithm, or ``git-sha1`` (the git
    blob id: sha1 over ``blob <size>\\0`` and the content)."""
    if size is None and algorithm == GIT_SHA1:
        size = os.path.getsize(path)
    hash_object = hasher(algorithm, size)
    with open(path, "rb") as handle:
        while True:
            block = handle.read(CHUNK)
            if not block:
                break
            hash_object.update(block)
    return hash_object.hexdigest()


def digest_bytes(data, algorithm="sha256"):
    if not isinstance(data, bytes):
        data = data.encode("utf-8")
    return hashlib.new(algorithm, data).hexdigest()
