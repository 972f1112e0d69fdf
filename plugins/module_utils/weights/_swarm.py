# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Piece-level fan-out on BitTorrent (libtorrent), hashing every byte once.

The chain of trust:

- the seed hashes each file while it writes it (:class:`StreamHash`): the Hub's digest
  (LFS sha256 or git blob sha1) and, from the same bytes, the BitTorrent v1 piece hashes
  (sha1 per piece). A file whose digest differs is removed; a matching one is published
  at once: its record (:func:`record`, the piece hashes and the info-hash) goes to the
  controller, which hands it to the site's other hosts;
- each file is its own private torrent (:func:`info_dict`, ``private: 1``), so it can be
  served the moment it is verified while the seed still downloads the rest;
- a peer adds the record it got from the controller (:func:`check_record` recomputes the
  info-hash) and libtorrent checks every piece as it arrives; the peer never reads a file
  back only to hash it. The marker records what each file was verified against
  (:func:`against`).

:class:`Swarm` is the engine: a libtorrent session that lives only inside the model step's
own process, with DHT, local peer discovery, UPnP and NAT-PMP off, an explicit listen port,
an IP filter that admits the site's hosts only, and peers given explicitly (no tracker).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import sys
import time

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files, _waiter

SHA256 = _files.SHA256
GIT_SHA1 = _files.GIT_SHA1
PIECE_MIN = 256 * 1024
PIECE_MAX = 16 * 1024 * 1024
PIECES_TARGET = 1024
PIECES = ".gpufleet-pieces.json"
# BEP 16 super-seeding on the hosts that serve a verified copy (the seed, holders): each
# peer is shown the pieces few others hold, so a piece leaves the seed about once (without
# it, 8 hosts on 16 MiB/s links: the seed sent each byte 2.1 times, and its uplink, not the
# peers', set the pace). Only when the site has SUPER_SEED_PEERS other hosts or more:
# with one peer it is the only taker, and shown a piece or two at a time it received at
# half its link (2 hosts: 42.6 s against 22.3 s). Not for a file of one piece: libtorrent
# never showed it to a second peer in our runs. libtorrent (2.0.8, and master) shows a peer
# its first piece of a super-seeded torrent only about 10 s after it connects (the two shown
# at the handshake are dropped: superseed_piece() returns while in_handshake()), then one
# piece at a time: what keeps 8 hosts above 1.5x (docs/model-weights.md, eighth stop).
SUPER_SEED_PEERS = 3
SYSTEM_PATHS = ("/usr/lib/python3/dist-packages",)
MAX_REQUESTS = 64  # blocks of 16 KiB asked of one peer at a time (session_settings)
RECONNECT_S = 0.25  # seconds between reconnects of an unfinished torrent to the site's hosts
# torrent_handle.status() flags: none of the optional queries (libtorrent's default asks
# for all of them: the piece bitfield, distributed copies, the torrent file, at each call)
STATUS_FLAGS = 0


class SwarmError(Exception):
    """A refusal of the swarm (bad record, engine missing, a peer's file did not finish)."""


# --- pieces and hashing while writing ---------------------------------------------------

def piece_length(size):
    """A power of two between 256 KiB and 16 MiB giving about 1024 pieces: a truncated or
    corrupt file loses at most one piece of what it already holds. At least 256 KiB: the
    seed super-seeds (below), revealing one piece to each peer at a time, and a piece
    of 32 KiB (a 32 MiB shard's share of 1024) left the seed's link idle between reveals;
    1 MiB was slower again (8 hosts, 6 MiB/s links: 77.1-79.7 s against 73.8-75.8 s with
    256 KiB, three runs each; 64 KiB 84.3 s): a peer forwards a piece only once it holds
    all of it and has checked it."""
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


# --- torrents ---------------------------------------------------------------------------

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
        rec["info_hash"], len(rec["pieces"]) // 40, rec["piece_length"], rec["seed"],
        rec["algo"], rec["digest"])


def process_io(path="/proc/self/io"):
    """This process's I/O counters (``read_bytes``: from the block device; ``rchar``: what
    its read calls returned, page cache included); {} where the file is missing."""
    out = {}
    try:
        with open(path) as handle:
            for line in handle:
                key, _sep, value = line.partition(":")
                if value.strip().isdigit():
                    out[key.strip()] = int(value)
    except OSError:
        return {}
    return out


def process_cpu():
    """CPU seconds this process used so far, every thread (the engine's too): user and
    system (the kernel's work for it: sockets, page faults of the engine's mapped files)."""
    times = os.times()
    return {"user": round(times.user, 2), "system": round(times.system, 2)}


# --- the engine -------------------------------------------------------------------------

def import_engine(extra_paths=SYSTEM_PATHS):
    """libtorrent, also from the distribution's package (python3-libtorrent) when the
    interpreter is a venv; None when it is not installed."""
    try:
        import libtorrent  # pylint: disable=import-error
        return libtorrent
    except ImportError:
        pass
    added = [p for p in extra_paths if os.path.isdir(p) and p not in sys.path]
    sys.path.extend(added)
    try:
        import libtorrent  # pylint: disable=import-error
        return libtorrent
    except ImportError:
        for path in added:
            sys.path.remove(path)
        return None


def engine_version(lt=None):
    lt = lt or import_engine()
    return getattr(lt, "__version__", None) if lt else None


def session_settings(address, port):
    """Only the fleet: no DHT, no local discovery, no UPnP/NAT-PMP, one explicit port."""
    return {
        "listen_interfaces": "%s:%d" % (address, int(port)),
        "outgoing_interfaces": address,
        "enable_dht": False,
        "enable_lsd": False,
        "enable_upnp": False,
        "enable_natpmp": False,
        "enable_incoming_utp": False,
        "enable_outgoing_utp": False,
        "allow_multiple_connections_per_ip": True,
        "user_agent": "gpufleet-model",
        "peer_fingerprint": "-GF0001-",
        "connections_limit": 400,
        "active_downloads": -1,
        "active_seeds": -1,
        "active_limit": -1,
        "dont_count_slow_torrents": False,
        "unchoke_slots_limit": -1,
        "request_timeout": 10,
        # at most MAX_REQUESTS blocks asked of a peer at a time (libtorrent: 500, 8 MiB).
        # Once every block is asked for, the end game asks a peer whose queue ran dry for a
        # block another peer still owes, one at a time: a holder that the machine's load
        # stalls sees its whole queue asked of the others, and its own copies, already on
        # their way, arrive twice. The queue bounds that: in the model scenario's repair (two
        # holders) on a loaded machine, 901,120 of 11,785,512 bytes arrived twice with
        # libtorrent's queue, and CI's run of 92bf6ae received more than its bound.
        "max_out_request_queue": MAX_REQUESTS,
        "peer_connect_timeout": 3,
        "min_reconnect_time": 1,
        "alert_mask": 0,
        # one disk, files written in order: two disk threads, not libtorrent's ten per
        # session (a host's threads would wake one another for every block)
        "aio_threads": 2,
    }


class Swarm(object):
    """One libtorrent session for the model step: add a verified file to serve, or a record
    to fetch; connect every torrent to the site's hosts; close (the port with it)."""

    statuses = None  # path -> this look's torrent_status (refresh)

    def __init__(self, lt, address, port, peers, allowed):
        self.lt = lt
        self.peers = [(p, int(port)) for p in peers if p != address]
        self.super_seed = len(self.peers) >= SUPER_SEED_PEERS
        self.port = int(port)
        self.session = lt.session(session_settings(address, port))
        filt = lt.ip_filter()
        filt.add_rule("0.0.0.0", "255.255.255.255", 1)
        for addr in set(list(allowed) + [address]):
            filt.add_rule(addr, addr, 0)
        self.session.set_ip_filter(filt)
        self.handles = {}
        self.checking = set()  # paths added but not started: their files are being checked
        self.last_connect = 0.0

    def add(self, rec, save_dir, seed=False):
        lt = self.lt
        pieces = bytes.fromhex(rec["pieces"])  # 20 bytes (SHA-1) a piece
        info = {"info": info_dict(rec["path"], rec["size"], rec["piece_length"], pieces)}
        params = lt.add_torrent_params()
        params.ti = lt.torrent_info(lt.bdecode(bencode(info)))
        params.save_path = save_dir
        flags = lt.torrent_flags.disable_dht | lt.torrent_flags.disable_lsd | \
            lt.torrent_flags.disable_pex
        if seed:
            flags |= lt.torrent_flags.seed_mode
            if self.super_seed and len(pieces) > 20:
                flags |= lt.torrent_flags.super_seeding
        else:
            # a partial file is checked first: libtorrent stops the torrent when the check
            # is done, and tick() starts it and connects the peers only then, so that no
            # piece the host already holds is asked for while the check still runs
            flags |= lt.torrent_flags.stop_when_ready
            self.checking.add(rec["path"])
        params.flags = flags
        os.makedirs(save_dir, exist_ok=True)
        handle = self.session.add_torrent(params)
        self.handles[rec["path"]] = handle
        if seed:
            self._connect(handle)
        return handle

    def _start_checked(self):
        """Start the torrents whose check of what is on disk has ended, and connect them."""
        lt = self.lt
        checking = (lt.torrent_status.states.checking_files,
                    lt.torrent_status.states.checking_resume_data)
        for path in sorted(self.checking):
            handle = self.handles[path]
            status = handle.status(STATUS_FLAGS)
            if status.state in checking or not handle.flags() & lt.torrent_flags.paused:
                continue  # still checking, or not yet stopped by stop_when_ready
            self.checking.discard(path)
            handle.unset_flags(lt.torrent_flags.stop_when_ready)
            handle.resume()
            self._connect(handle)

    def _connect(self, handle):
        for peer in self.peers:
            try:
                handle.connect_peer(peer)
            except RuntimeError:
                pass

    def refresh(self):
        """One status of every torrent for this look (``tick``, ``state`` and ``errors``
        read it): libtorrent's plain status, without the piece bitfield, the distributed
        copies or the torrent file that its default asks for at every call."""
        self.statuses = {path: handle.status(STATUS_FLAGS)
                         for path, handle in self.handles.items()}
        return self.statuses

    def _looked(self):
        if self.statuses is None or set(self.statuses) != set(self.handles):
            return self.refresh()
        return self.statuses

    def tick(self, now=None):
        """Start the torrents whose check ended, take this look's status of every torrent,
        and reconnect unfinished torrents to the site's hosts every RECONNECT_S (a host that
        had not added the file yet refused the first connection; each file is a torrent of
        its own, so a file's connections wait for this after the controller hands it out)."""
        self._start_checked()
        statuses = self.refresh()
        now = time.time() if now is None else now
        if now - self.last_connect < RECONNECT_S:
            return
        self.last_connect = now
        for path, handle in self.handles.items():
            if path in self.checking:
                continue
            status = statuses[path]
            if not status.is_seeding and status.num_peers < len(self.peers):
                self._connect(handle)

    def state(self):
        """path -> (finished, bytes done, payload bytes received, bytes received in all,
        payload bytes received twice), from this look's status. The last: in its end game
        libtorrent asks more than one peer for the last blocks and cancels the slower
        request; a block that arrives before the cancel is redundant (counted in the payload,
        written once)."""
        return {path: (bool(status.is_seeding), int(status.total_wanted_done),
                       int(status.total_payload_download), int(status.total_download),
                       int(status.total_redundant_bytes))
                for path, status in self._looked().items()}

    def errors(self):
        return {path: status.errc.message() for path, status in self._looked().items()
                if status.errc and status.errc.value()}

    def close(self, timeout=2.0):
        """Remove every torrent (files closed and flushed) and end the session: its port
        closes with it."""
        for handle in list(self.handles.values()):
            try:
                self.session.remove_torrent(handle)
            except RuntimeError:
                pass
        # the session lets go of the removed torrents (their files closed) within timeout
        _waiter.wait(self.session.get_torrents, ready=lambda torrents: not torrents,
                     timeout=timeout, interval=0.1)
        self.handles = {}
        self.session.pause()
        session, self.session = self.session, None
        del session
