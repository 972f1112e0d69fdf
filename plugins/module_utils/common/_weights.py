# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""A model's weights on a host as every stage sees them, and every way a weight file is
verified: the one place.

Three stages use it: the check (the rule of a repo id, :func:`model_path`), the deploy's
preflight (is the directory verified for the commit? :func:`quick_check`) and the weights
step (everything else), so it lives below them all.

A weight file is verified in one of three ways, each against the manifest's digest (the
LFS sha256, or git's blob sha1 for small files):

- **while it is written** (the Hub download): :class:`StreamHash` hashes the bytes as they
  reach the file (no read back) and makes, from the same bytes, the file's BitTorrent v1
  piece hashes; :func:`streamed` compares the result with the manifest; :func:`record`
  turns the piece hashes into the file's piece record, which the site's other hosts fetch
  against;
- **piece by piece** (a swarm peer): the record the controller hands over is checked
  against the manifest and its own info-hash (:func:`check_record`); the engine then checks
  every piece as it arrives;
- **read back** (an rsync or local copy, a file without a record, the deep check):
  :func:`verify_files` hashes the file from disk (:func:`file_digest`).

What each file was verified against (:func:`against`) goes into the *verified marker*
(:data:`MARKER`, :func:`write_marker`) with the size and mtime the file had; the piece
records are kept beside the weights (:data:`PIECES`). A directory is verified when its
marker names the expected commit and every file of the manifest (:data:`MANIFEST`) still
has the recorded size and mtime (:func:`quick_check`: no file content is read).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files

MARKER = ".gpufleet-verified.json"
MANIFEST = ".gpufleet-manifest.json"
PIECES = ".gpufleet-pieces.json"
SHA256 = _files.SHA256
GIT_SHA1 = _files.GIT_SHA1
PIECE_MIN = 256 * 1024
PIECE_MAX = 16 * 1024 * 1024
PIECES_TARGET = 1024


class ModelError(Exception):
    """A refusal with a message that names the input, its value and what was expected."""


class SwarmError(Exception):
    """A refusal of the swarm (bad record, engine missing, a peer's file did not finish)."""


def model_path(root, repo_id, revision):
    """Default model directory for a repo at a revision: ``<root>/<org>--<name>/<revision>``."""
    if not repo_id or "/" not in repo_id:
        raise ModelError("model_repo is %r: expected '<org>/<name>'" % (repo_id,))
    safe = repo_id.replace("/", "--")
    return os.path.join(root, safe, revision or "main")


# --- read back ---------------------------------------------------------------------------

def file_digest(path, algo, size=None):
    """sha256 of the content, or the git blob sha1 (``blob <size>\\0`` + content)."""
    if algo not in (SHA256, GIT_SHA1):
        raise ModelError("unknown digest algorithm %r: expected sha256 or git-sha1" % algo)
    return _files.digest(path, algo, size=size)


def verify_files(base, entries, workers=4):
    """Hash each file of ``entries`` once, in parallel. Returns (good, bad, bytes_hashed).

    ``good`` maps path -> (size, mtime_ns) as they were when hashed; ``bad`` maps path ->
    reason. A file whose size is wrong is not hashed.
    """
    def one(item):
        full = os.path.join(base, item["path"])
        try:
            before = os.stat(full)
        except OSError:
            return item, "missing", None, 0
        if before.st_size != item["size"]:
            return item, "size %d, expected %d" % (before.st_size, item["size"]), None, 0
        digest = file_digest(full, item["algo"], item["size"])
        if digest != item["digest"]:
            return item, "%s %s, expected %s" % (item["algo"], digest, item["digest"]), None, \
                item["size"]
        return item, None, (before.st_size, before.st_mtime_ns), item["size"]

    good, bad, hashed = {}, {}, 0
    with ThreadPoolExecutor(max_workers=max(1, int(workers))) as pool:
        for item, problem, stat, nbytes in pool.map(one, entries):
            hashed += nbytes
            if problem:
                bad[item["path"]] = problem
            else:
                good[item["path"]] = stat
    return good, bad, hashed


def read_back(entry):
    """The marker's note for a file verified by :func:`verify_files`."""
    return "%s:%s (read back and hashed)" % (entry["algo"], entry["digest"])


# --- while written: the digest and the piece hashes from the same bytes ------------------

def piece_length(size):
    """A power of two between 256 KiB and 16 MiB giving about 1024 pieces: a truncated or
    corrupt file loses at most one piece of what it already holds. At least 256 KiB: the
    seed super-seeded (before slices), revealing one piece to each peer at a time, and a piece
    of 32 KiB (a 32 MiB shard's share of 1024) left the seed's link idle between reveals;
    1 MiB was slower again (8 hosts, 6 MiB/s links: 77.1-79.7 s against 73.8-75.8 s with
    256 KiB, three runs each; 64 KiB 84.3 s): a peer forwards a piece only once it holds
    all of it and has checked it. Slices (``_swarm.SLICE_FETCHERS``) replaced super-seeding
    on 256 KiB pieces; other sizes were not measured with them."""
    length = PIECE_MIN
    while length < PIECE_MAX and length * PIECES_TARGET < size:
        length *= 2
    return length


class StreamHash(object):
    """The manifest digest and the v1 piece hashes of a file, from the bytes as they are
    written (no read back). ``algo`` is sha256 or git-sha1 (git's blob header first)."""

    def __init__(self, algo, size, plen=None):
        if algo not in (SHA256, GIT_SHA1):
            raise SwarmError("unknown digest algorithm %r: expected sha256 or git-sha1" % algo)
        self.digest = _files.hasher(algo, size)
        self.size = size
        self.plen = plen or piece_length(size)
        self.piece = hashlib.sha1()
        self.in_piece = 0
        self.pieces = []
        self.count = 0

    def update(self, data):
        self.digest.update(data)
        self.count += len(data)
        view = memoryview(data)
        while len(view):
            take = min(len(view), self.plen - self.in_piece)
            self.piece.update(view[:take])
            self.in_piece += take
            view = view[take:]
            if self.in_piece == self.plen:
                self.pieces.append(self.piece.digest())
                self.piece = hashlib.sha1()
                self.in_piece = 0

    def finish(self):
        """(hex digest, concatenated piece hashes)."""
        if self.in_piece:
            self.pieces.append(self.piece.digest())
            self.piece = hashlib.sha1()
            self.in_piece = 0
        return self.digest.hexdigest(), b"".join(self.pieces)


def streamed(hasher, entry):
    """(digest, piece hashes, problem) of a file hashed while it was written: ``problem`` is
    None when the bytes hashed and their digest are the manifest's, else what differs."""
    digest, pieces = hasher.finish()
    if hasher.count != entry["size"] or digest != entry["digest"]:
        return digest, pieces, "%d bytes, %s %s; the manifest says %d bytes, %s" % (
            hasher.count, entry["algo"], digest, entry["size"], entry["digest"])
    return digest, pieces, None


def hash_existing(path, hasher, chunk=8 * 1024 * 1024):
    """Feed the bytes already in a partial file into ``hasher`` (resume after a kill: the
    one read of bytes that were written by a process that is gone). Returns bytes read."""
    done = 0
    with open(path, "rb") as handle:
        while True:
            block = handle.read(chunk)
            if not block:
                return done
            hasher.update(block)
            done += len(block)


def empty_ok(entry):
    """Is the manifest's digest of ``entry`` the digest of no bytes (an empty file)?"""
    digest, _pieces = StreamHash(entry["algo"], 0).finish()
    return digest == entry["digest"]


# --- piece records -------------------------------------------------------------------------

def bencode(value):
    """BitTorrent's encoding (BEP 3): int, bytes/str, list, dict with sorted byte keys."""
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        return b"i%de" % value
    if isinstance(value, str):
        value = value.encode("utf-8")
    if isinstance(value, bytes):
        return b"%d:%s" % (len(value), value)
    if isinstance(value, (list, tuple)):
        return b"l" + b"".join(bencode(item) for item in value) + b"e"
    if isinstance(value, dict):
        items = sorted((k.encode("utf-8") if isinstance(k, str) else k, v)
                       for k, v in value.items())
        return b"d" + b"".join(bencode(k) + bencode(v) for k, v in items) + b"e"
    raise SwarmError("cannot bencode %r" % (value,))


def info_dict(path, size, plen, pieces):
    """The v1 info dict of one file (single-file torrent named after its base name),
    private (BEP 27: no DHT, no peer exchange, no local discovery for it)."""
    return {"name": os.path.basename(path), "length": int(size), "piece length": int(plen),
            "pieces": pieces, "private": 1}


def info_hash(info):
    return hashlib.sha1(bencode(info)).hexdigest()


def record(entry, digest, plen, pieces, host):
    """What the controller hands to the peers for one file: JSON-safe (hex pieces)."""
    info = info_dict(entry["path"], entry["size"], plen, pieces)
    return {"path": entry["path"], "size": entry["size"], "algo": entry["algo"],
            "digest": digest, "piece_length": plen, "pieces": pieces.hex(),
            "info_hash": info_hash(info), "seed": host}


def piece_count(rec):
    """The pieces of a record's file (its hex piece hashes: 40 digits a piece)."""
    return len(rec["pieces"]) // 40


def own_record(base, entry, host):
    """The record of a verified file that has none kept: hashed from disk once (a copy
    placed before the swarm existed)."""
    hasher = StreamHash(entry["algo"], entry["size"])
    hash_existing(os.path.join(base, entry["path"]), hasher)
    digest, pieces = hasher.finish()
    if digest != entry["digest"]:
        raise ModelError("%s: %s %s, expected %s; run the deep check (model_verify: "
                         "deep)" % (entry["path"], entry["algo"], digest, entry["digest"]))
    return record(entry, digest, hasher.plen, pieces, host)


def check_record(rec, manifest_by_path):
    """The info dict of a record, after checking it against the manifest and its own
    info-hash (the transport through the controller is checked, the content is checked
    piece by piece by the engine)."""
    entry = manifest_by_path.get(rec.get("path"))
    if entry is None:
        raise SwarmError("record for %r: not a file of the manifest" % rec.get("path"))
    if rec.get("size") != entry["size"] or rec.get("digest") != entry["digest"]:
        raise SwarmError("record for %s: size %s digest %s, the manifest says %s %s"
                         % (entry["path"], rec.get("size"), rec.get("digest"), entry["size"],
                            entry["digest"]))
    pieces = bytes.fromhex(rec["pieces"])
    plen = int(rec["piece_length"])
    want = (entry["size"] + plen - 1) // plen
    if len(pieces) != 20 * want:
        raise SwarmError("record for %s: %d piece hashes, expected %d"
                         % (entry["path"], len(pieces) // 20, want))
    info = info_dict(entry["path"], entry["size"], plen, pieces)
    if info_hash(info) != rec.get("info_hash"):
        raise SwarmError("record for %s: info-hash %s does not match its pieces (%s)"
                         % (entry["path"], rec.get("info_hash"), info_hash(info)))
    return info


def against(rec, how):
    """The marker's note of what a file was verified against."""
    if how == "hub":
        return "%s:%s (hashed while written)" % (rec["algo"], rec["digest"])
    return "btv1:%s (%d pieces of %d bytes made by %s from %s:%s)" % (
        rec["info_hash"], piece_count(rec), rec["piece_length"], rec["seed"],
        rec["algo"], rec["digest"])


def load_pieces(base):
    """The piece records kept beside the weights in ``base`` (path -> record)."""
    return _files.read_json(os.path.join(base, PIECES), {}) or {}


def save_pieces(base, records):
    _files.write_json(os.path.join(base, PIECES), records)


# --- the verified marker ----------------------------------------------------------------

def write_marker(base, repo_id, commit, good, against=None):
    """The verified marker; ``against`` maps path -> what the file was verified against
    (the Hub's digest while written, or the piece hashes of the seed's verified copy)."""
    files = dict((p, {"size": s, "mtime_ns": m}) for p, (s, m) in good.items())
    for path, note in (against or {}).items():
        if path in files:
            files[path]["against"] = note
    marker = {"repo_id": repo_id, "commit": commit, "verified_at": int(time.time()),
              "files": files}
    _files.write_json(os.path.join(base, MARKER), marker)
    return marker


def read_marker(base):
    """The verified marker of ``base``, or None."""
    return _files.read_json(os.path.join(base, MARKER))


def marked(base):
    """path -> (size, mtime_ns) of every file the marker of ``base`` records."""
    marker = read_marker(base) or {}
    return dict((k, (v["size"], v["mtime_ns"])) for k, v in marker.get("files", {}).items())


def trusted(base, commit, manifest):
    """Files of ``base`` that were hashed before (marker of the same commit, same size and
    mtime): not hashed again."""
    marker = read_marker(base) or {}
    if marker.get("commit") != commit:
        return {}
    good = {}
    for item in manifest:
        rec = (marker.get("files") or {}).get(item["path"])
        try:
            st = os.stat(os.path.join(base, item["path"]))
        except OSError:
            continue
        if rec and st.st_size == rec["size"] == item["size"] and st.st_mtime_ns == rec["mtime_ns"]:
            good[item["path"]] = (st.st_size, st.st_mtime_ns)
    return good


def quick_check(base, commit):
    """Is ``base`` verified for ``commit``? Reads the marker and stats files; hashes nothing.

    Returns ``{"verified": bool, "problems": [...], "files": n, "bytes": n}``.
    """
    marker = read_marker(base)
    manifest = _files.read_json(os.path.join(base, MANIFEST))
    if not os.path.isdir(base):
        return {"verified": False, "problems": ["%s does not exist" % base], "files": 0,
                "bytes": 0}
    if marker is None or manifest is None:
        return {"verified": False, "problems": ["%s has no verified marker %s or manifest %s"
                                                % (base, MARKER, MANIFEST)],
                "files": 0, "bytes": 0}
    problems = []
    if marker.get("commit") != commit:
        problems.append("marker is for commit %s, expected %s" % (marker.get("commit"), commit))
    recorded = marker.get("files") or {}
    for item in manifest.get("files", []):
        path = item["path"]
        full = os.path.join(base, path)
        try:
            st = os.stat(full)
        except OSError:
            problems.append("%s is missing" % path)
            continue
        want = recorded.get(path)
        if want is None:
            problems.append("%s was never verified" % path)
        elif st.st_size != want["size"] or st.st_size != item["size"]:
            problems.append("%s has %d bytes, verified with %d" % (path, st.st_size, want["size"]))
        elif st.st_mtime_ns != want["mtime_ns"]:
            problems.append("%s changed after it was verified (mtime)" % path)
    files = manifest.get("files", [])
    return {"verified": not problems, "problems": problems, "files": len(files),
            "bytes": sum(item["size"] for item in files)}


def demote(base, reasons):
    """Take the marker away so the directory is not served from (before a repair)."""
    try:
        os.unlink(os.path.join(base, MARKER))
    except OSError:
        pass
    return reasons
