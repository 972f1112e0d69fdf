# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Model weights on a host: the manifest, the space and placement.

The manifest is the Hub's tree listing at one commit: each file's path, size and digest
(the LFS sha256, or the git blob sha1 for small files; the same values the Hub sends as
``X-Linked-Etag`` / ``ETag``). It is kept beside the weights (:data:`MANIFEST`).

How a file is verified against it (hashed while written, piece by piece, or read back) and
the verified marker (:data:`MARKER`) are ``common/_weights.py``'s: the one place.

Layout on a host: weights at ``path``, staged at ``staging_path(path)`` (same parent, so
the final move is one rename). Nothing here imports huggingface_hub: the download itself
is ``_model_hub``'s (the ``model_fetch`` module drives it).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import shutil
import time

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files
from ansible_collections.gpufleet.sglang.plugins.module_utils.common._weights import (
    GIT_SHA1, MANIFEST, MARKER, PIECES, SHA256, ModelError)

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
PROGRESS = ".gpufleet-progress.json"
# Files of our own (and huggingface_hub's local-dir cache) that are not part of the model.
OWN_NAMES = (MARKER, MANIFEST, PROGRESS, PIECES, ".cache")


# --- names and paths -------------------------------------------------------------------

def is_commit(revision):
    return bool(COMMIT_RE.match(revision or ""))


def staging_path(path):
    """Where a directory is assembled before its one rename into ``path``."""
    return beside(path, ".staging")


def beside(path, suffix):
    """A file beside the model directory (outside it and its staging directory)."""
    path = path.rstrip("/")
    return os.path.join(os.path.dirname(path), "." + os.path.basename(path) + suffix)


def last_fetch_path(path):
    """What the last fetch into ``path`` did (source, bytes, hashing, time)."""
    return beside(path, ".last-fetch.json")


# --- manifest --------------------------------------------------------------------------

def manifest_entry(path, size, blob_sha1, lfs_sha256=None):
    if lfs_sha256:
        return {"path": path, "size": int(size), "algo": SHA256, "digest": lfs_sha256}
    return {"path": path, "size": int(size), "algo": GIT_SHA1, "digest": blob_sha1}


def manifest_from_tree(entries, allow=None):
    """The manifest from tree entries (dicts as the Hub's JSON), files only, sorted by path.

    ``allow`` is a list of fnmatch patterns (huggingface_hub's allow_patterns); empty or
    None keeps every file.
    """
    import fnmatch
    manifest = []
    for entry in entries:
        if entry.get("type", "file") != "file":
            continue
        path = entry["path"]
        if allow and not any(fnmatch.fnmatch(path, pattern) for pattern in allow):
            continue
        lfs = entry.get("lfs") or {}
        manifest.append(manifest_entry(path, entry["size"], entry.get("oid"), lfs.get("oid")))
    return sorted(manifest, key=lambda item: item["path"])


def check_manifest(manifest, repo_id, commit):
    """Refuse a manifest the server cannot start from; returns it when usable."""
    paths = set(item["path"] for item in manifest)
    if "config.json" not in paths:
        raise ModelError(
            "model_repo %s at %s lists no config.json (files: %s): expected a model repo "
            "with config.json at its root (check model_repo, model_revision and "
            "model_allow_patterns)" % (repo_id, commit, ", ".join(sorted(paths)[:8]) or "none"))
    for item in manifest:
        if item["path"].startswith("/") or ".." in item["path"].split("/"):
            raise ModelError("manifest path %r is not relative" % item["path"])
    return manifest


def total_bytes(manifest):
    return sum(item["size"] for item in manifest)


# JSON files are read and written by the collection's one file helper (_files).
read_json = _files.read_json
write_json = _files.write_json


# --- space -----------------------------------------------------------------------------

def present_bytes(base, manifest, partials=None):
    """Bytes of the manifest already in ``base`` (whole files of the right size, plus the
    resumable partial bytes ``partials`` maps path -> size)."""
    have = 0
    for item in manifest:
        full = os.path.join(base, item["path"])
        try:
            size = os.path.getsize(full)
        except OSError:
            size = (partials or {}).get(item["path"], 0)
        have += min(size, item["size"])
    return have


def space_check(target_dir, manifest, present, free=None):
    """Needed (missing bytes) against free on the filesystem of ``target_dir``.

    Returns (needed, free); raises ModelError naming both numbers when it does not fit.
    ``free`` may be given (a test knob, or from statvfs).
    """
    needed = max(0, total_bytes(manifest) - present)
    probe = target_dir
    while not os.path.exists(probe):
        probe = os.path.dirname(probe) or "/"
    if free is None:
        free = shutil.disk_usage(probe).free
    if needed > free:
        error = ModelError(
            "not enough space for the model under %s: needed %d bytes (%s still missing of "
            "%s, staged in %s), free %d bytes (%s); nothing was transferred"
            % (probe, needed, human(needed), human(total_bytes(manifest)), target_dir, free,
               human(free)))
        error.needed, error.free = needed, free
        raise error
    return needed, free


def human(nbytes):
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return "%.1f %s" % (value, unit) if unit != "B" else "%d B" % value
        value /= 1024
    return "%d B" % nbytes


# --- placement -------------------------------------------------------------------------

def place(staging, path):
    """Move the verified staging directory into place (rename; the old one goes aside)."""
    old = None
    if os.path.exists(path):
        old = staging_path(path)[:-len(".staging")] + ".old-%d" % int(time.time() * 1000)
        os.rename(path, old)
    os.rename(staging, path)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def clean_orphans(staging, manifest):
    """Remove what is not part of the manifest (leftovers of another commit) from staging.

    huggingface_hub's own partial files live under ``.cache/huggingface/download`` and are
    handled by the fetch (resumed or removed); our files are kept.
    """
    wanted = set(item["path"] for item in manifest)
    removed = []
    for root, dirs, files in os.walk(staging):
        rel_root = os.path.relpath(root, staging)
        if rel_root.split(os.sep)[0] in OWN_NAMES:
            dirs[:] = []
            continue
        for name in files:
            rel = os.path.normpath(os.path.join(rel_root, name))
            if rel in OWN_NAMES:
                continue
            if rel not in wanted:
                os.unlink(os.path.join(root, name))
                removed.append(rel)
    return removed


# --- progress --------------------------------------------------------------------------

def progress_line(done_files, files, done_bytes, nbytes, elapsed):
    rate = done_bytes / elapsed if elapsed > 0 else 0.0
    eta = (nbytes - done_bytes) / rate if rate > 0 else None
    return "%d/%d files, %s of %s, %s/s, ETA %s" % (
        done_files, files, human(done_bytes), human(nbytes), human(int(rate)),
        "%ds" % eta if eta is not None else "unknown")
