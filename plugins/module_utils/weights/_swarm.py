# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Piece-level fan-out on BitTorrent (libtorrent), hashing every byte once.

The chain of trust:

- the seed hashes each file while it writes it (``common/_weights.py``'s ``StreamHash``):
  the Hub's digest (LFS sha256 or git blob sha1) and, from the same bytes, the BitTorrent
  v1 piece hashes (sha1 per piece). A file whose digest differs is removed; a matching one
  is published at once: its record (``record``, the piece hashes and the info-hash) goes
  to the controller, which hands it to the site's other hosts;
- each file is its own private torrent (``info_dict``, ``private: 1``), so it can be
  served the moment it is verified while the seed still downloads the rest;
- a peer adds the record it got from the controller (``check_record`` recomputes the
  info-hash) and libtorrent checks every piece as it arrives; the peer never reads a file
  back only to hash it. The marker records what each file was verified against
  (``against``). Every one of those checks is ``common/_weights.py``'s.

:class:`Swarm` is the engine: a libtorrent session that lives only inside the model step's
own process, with DHT, local peer discovery, UPnP and NAT-PMP off, an explicit listen port,
an IP filter that admits the site's hosts only, and peers given explicitly (no tracker).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys
import time

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _waiter
from ansible_collections.gpufleet.sglang.plugins.module_utils.common._weights import (
    bencode, info_dict, piece_count)

# Slices (docs/experiments/model-weights-notebook.md, ninth stop): on a site of SLICE_FETCHERS hosts that fetch
# or more, each of them takes from the feeder (the seed or the verified host whose records
# the site takes) only its own slice of a file's pieces (slice_of), then fetches the rest
# from the site's other hosts, without the feeder: the feeder sends each piece once, to all
# fetchers at once. Before, the feeder super-seeded (BEP 16): libtorrent (2.0.8, and its
# master) shows a peer its first piece of a super-seeded torrent only ~10 s after it
# connects (the two shown at the handshake are dropped: superseed_piece() returns while
# in_handshake()), then one piece at a time: 8 hosts on 6 MiB/s links took 1.63-1.68x one
# host's copy; without super-seeding the feeder sent each byte 1.9 times (2.13x).
SLICE_FETCHERS = 2
# slices a fetcher asks the feeder for at a time; the files after it wait, wanting nothing,
# in the order their records came. A verified host that feeds 7 new hosts hands out every
# record at once: slices asked for together came out of its link together, and nobody
# traded before the end (the bench's fan-out, 8 shards of 32 MiB at 6 MiB/s: 84.0 s with
# every slice at once, 62.2 s with 2 at a time, 55.7 s with 1). While the seed downloads,
# one slice at a time is one connection from the feeder into a fetcher whose link is full
# of trade: it got too small a share, the feeder's link ran 69 % busy and the slices fell
# behind (16 shards of 16 MiB: 8 hosts 1.42-1.49x, 4 hosts 1.53-1.56x with 1; 1.33-1.38x
# and 1.33x with 2; the fan-out 54.95 s with 1, 57.01 s with 2, 59.98 s with 3;
# docs/experiments/model-weights-notebook.md, twelfth stop)
SLICES_AT_ONCE = 2
# seconds a fetcher that holds its slice may make no progress without the feeder before it
# asks the feeder too (a host that fails or stalls inside its slice would leave its pieces
# with the feeder alone)
STALL_S = 10.0
SYSTEM_PATHS = ("/usr/lib/python3/dist-packages",)
MAX_REQUESTS = 64  # blocks of 16 KiB asked of one peer at a time (session_settings)
RECONNECT_S = 0.25  # seconds between reconnects of an unfinished torrent to the site's hosts
# torrent_handle.status() flags: none of the optional queries (libtorrent's default asks
# for all of them: the piece bitfield, distributed copies, the torrent file, at each call)
STATUS_FLAGS = 0


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
        # a finished torrent waits for the hosts that still fetch to connect to it: the
        # feeder does not connect back to a fetcher that holds its slice (Swarm)
        "seeding_outgoing_connections": False,
    }


def slice_of(count, info_hash, fetchers, address):
    """The pieces of a file of ``count`` pieces that the fetcher at ``address`` takes from
    the feeder itself: piece i is the slice of the fetcher ranked (i + k) mod n among the
    site's n fetchers (sorted addresses), k from the file's info-hash, so that each file's
    first pieces go to another host. None where the host does not slice: fewer than
    SLICE_FETCHERS fetchers, fewer pieces than fetchers, or not a fetcher."""
    fetchers = sorted(set(fetchers))
    if len(fetchers) < SLICE_FETCHERS or count < len(fetchers) or address not in fetchers:
        return None
    rank = fetchers.index(address)
    k = int(info_hash[:8], 16)
    return [i for i in range(count) if (i + k) % len(fetchers) == rank]


def base_flags(lt):
    """The flags of every torrent: no DHT, local discovery or peer exchange, and the
    session's IP filter applied (libtorrent's default flags have it; flags given replace
    them, and a torrent without it took any address that knew its info-hash)."""
    return lt.torrent_flags.disable_dht | lt.torrent_flags.disable_lsd | \
        lt.torrent_flags.disable_pex | lt.torrent_flags.apply_ip_filter


_COUNTERS = ("total_payload_download", "total_download", "total_redundant_bytes",
             "total_payload_upload")


def _slice_priorities(count, mine):
    """Piece priorities that want a fetcher's slice only (4: libtorrent's default)."""
    priorities = [0] * count
    for index in mine:
        priorities[index] = 4
    return priorities


def _counters(status, carried=None):
    """A torrent's byte counters (_COUNTERS), plus those its removed self counted."""
    carried = carried or (0, 0, 0, 0)
    return tuple(int(getattr(status, name)) + before for name, before in zip(_COUNTERS, carried))


class Swarm(object):
    """One libtorrent session for the model step: add a verified file to serve, or a record
    to fetch; connect every torrent to the site's hosts; close (the port with it).

    With a ``feeder`` and the site's ``fetchers`` (addresses), a fetcher's torrent wants its
    slice only (:func:`slice_of`; the other pieces at priority 0; SLICES_AT_ONCE files at a
    time, the next ones wanting nothing until one of them holds its slice); once it holds
    its slice the torrent is removed and added again from the pieces it holds
    (``have_pieces``: not read back) and connected to the site's hosts but the feeder (libtorrent would connect
    again to every host its torrent knew), which it asks too only after STALL_S without
    progress. The bytes counted by the removed torrent are carried over."""

    statuses = None  # path -> this look's torrent_status (refresh)

    def __init__(self, lt, address, port, peers, allowed, feeder=None, fetchers=()):
        self.lt = lt
        self.address = address
        self.peers = [(p, int(port)) for p in peers if p != address]
        self.feeder = feeder if feeder != address else None
        self.fetchers = list(fetchers)
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
        self.slicing = {}  # path -> (record, save_dir, its slice) until it holds its slice
        self.waiting = []  # sliced paths that do not ask for their slice yet (SLICES_AT_ONCE)
        self.moving = {}  # path -> (record, save_dir, pieces held, bytes) from remove to add
        self.without_feeder = {}  # path -> (bytes done, when they last grew)
        self.carried = {}  # path -> the counters of its removed torrent (_COUNTERS)
        self.moved = []  # paths added again once their slice was held, in order
        self.stalled = []  # paths that asked the feeder again after STALL_S, in order

    def _params(self, rec, save_dir, flags):
        lt = self.lt
        pieces = bytes.fromhex(rec["pieces"])  # 20 bytes (SHA-1) a piece
        info = {"info": info_dict(rec["path"], rec["size"], rec["piece_length"], pieces)}
        params = lt.add_torrent_params()
        params.ti = lt.torrent_info(lt.bdecode(bencode(info)))
        params.save_path = save_dir
        params.flags = flags | base_flags(lt)
        return params

    def _served_params(self, rec, save_dir):
        """A file this host verified, to serve: added as holding every piece (``have_pieces``,
        nothing read back). Not libtorrent's seed mode: it hashes each piece again, read
        back from disk, the first time a peer asks for it (the seed had hashed every byte as
        it wrote it; a holder's pieces are in its records): on a repo larger than the page
        cache, a read of the whole repo on the seed (docs/experiments/model-weights-notebook.md, tenth stop)."""
        params = self._params(rec, save_dir, 0)
        params.have_pieces = [True] * piece_count(rec)
        return params

    def add(self, rec, save_dir, seed=False):
        lt = self.lt
        if seed:
            params = self._served_params(rec, save_dir)
        else:
            # a partial file is checked first: libtorrent stops the torrent when the check
            # is done, and tick() starts it and connects the peers only then, so that no
            # piece the host already holds is asked for while the check still runs
            params = self._params(rec, save_dir, lt.torrent_flags.stop_when_ready)
            self.checking.add(rec["path"])
            count = piece_count(rec)
            mine = None
            if self.feeder:
                mine = slice_of(count, rec["info_hash"], self.fetchers, self.address)
            if mine is not None:
                if len(self.slicing) - len(self.waiting) < SLICES_AT_ONCE:
                    params.piece_priorities = _slice_priorities(count, mine)
                else:
                    params.piece_priorities = [0] * count
                    self.waiting.append(rec["path"])
                self.slicing[rec["path"]] = (rec, save_dir, mine)
        os.makedirs(save_dir, exist_ok=True)
        handle = self.session.add_torrent(params)
        self.handles[rec["path"]] = handle
        if seed:
            self._connect(handle, self.peers)
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
            self._connect(handle, self._targets(path))

    def _move_sliced(self, now):
        """Torrents whose slice is held: removed, then (once the session let go of them)
        added again from the pieces they hold, without the feeder."""
        lt = self.lt
        for path, (rec, save_dir, mine) in sorted(self.slicing.items()):
            if path in self.checking or path in self.waiting:
                continue
            handle = self.handles[path]
            held = list(handle.status(lt.torrent_handle.query_pieces).pieces)
            if not all(held[index] for index in mine):
                continue
            del self.slicing[path]
            if all(held):
                continue  # nothing left to fetch (a copy resumed whole)
            status = handle.status(STATUS_FLAGS)
            self.carried[path] = _counters(status, self.carried.get(path))
            self.session.remove_torrent(handle)
            del self.handles[path]
            self.moving[path] = (rec, save_dir, held, int(status.total_wanted_done))
        while self.waiting and len(self.slicing) - len(self.waiting) < SLICES_AT_ONCE:
            path = self.waiting.pop(0)
            rec, _save_dir, mine = self.slicing[path]
            self.handles[path].prioritize_pieces(_slice_priorities(piece_count(rec), mine))
        for path, (rec, save_dir, held, done) in sorted(self.moving.items()):
            params = self._params(rec, save_dir, lt.torrent_flags.duplicate_is_error)
            params.have_pieces = held
            try:
                handle = self.session.add_torrent(params)
            except RuntimeError:
                continue  # the session still holds the removed torrent: next look
            del self.moving[path]
            self.handles[path] = handle
            self.moved.append(path)
            self.without_feeder[path] = (done, now)
            self._connect(handle, self._targets(path))

    def _targets(self, path):
        if path in self.without_feeder:
            return [peer for peer in self.peers if peer[0] != self.feeder]
        return self.peers

    def _connect(self, handle, peers):
        for peer in peers:
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
        """Start the torrents whose check ended, move those that hold their slice, take this
        look's status of every torrent, and reconnect unfinished torrents to the site's hosts
        every RECONNECT_S (a host that had not added the file yet refused the first
        connection; each file is a torrent of its own, so a file's connections wait for this
        after the controller hands it out)."""
        now = time.time() if now is None else now
        self._start_checked()
        self._move_sliced(now)
        statuses = self.refresh()
        for path, (done, since) in list(self.without_feeder.items()):
            status = statuses[path]
            if status.is_seeding:
                del self.without_feeder[path]
            elif status.total_wanted_done > done:
                self.without_feeder[path] = (status.total_wanted_done, now)
            elif now - since >= STALL_S:
                del self.without_feeder[path]  # its _targets are every host again
                self.stalled.append(path)
        if now - self.last_connect < RECONNECT_S:
            return
        self.last_connect = now
        for path, handle in self.handles.items():
            if path in self.checking:
                continue
            status = statuses[path]
            targets = self._targets(path)
            if not status.is_seeding and status.num_peers < len(targets):
                self._connect(handle, targets)

    def state(self):
        """path -> (finished, bytes done, payload bytes received, bytes received in all,
        payload bytes received twice), from this look's status, with what a moved torrent
        counted before (a torrent between its remove and its add: its last counters). The
        last: in its end game libtorrent asks more than one peer for the last blocks and
        cancels the slower request; a block that arrives before the cancel is redundant
        (counted in the payload, written once)."""
        out = {}
        for path, status in self._looked().items():
            counted = _counters(status, self.carried.get(path))
            out[path] = (bool(status.is_seeding), int(status.total_wanted_done)) + counted[:3]
        for path in self.moving:
            counted = self.carried[path]
            out[path] = (False, self.moving[path][3]) + counted[:3]
        return out

    def served(self):
        """Payload bytes this host sent to the others (moved torrents' included), from a
        fresh status."""
        self.refresh()
        return self.payload_sent()

    def payload_sent(self):
        """Payload bytes this host sent to the others, from this look's status (the
        lease's movement: no status is asked for)."""
        return sum(_counters(status, self.carried.get(path))[3]
                   for path, status in self._looked().items()) + \
            sum(self.carried[path][3] for path in self.moving)

    def disk_counters(self, timeout=2.0):
        """What this host's engine did with its disk: ``read_back``, blocks of 16 KiB read
        back from disk to hash them (libtorrent's ``disk.num_read_back``: none for a file it
        serves as held, every block of it in seed mode), and ``hash_us``, the microseconds
        its disk threads spent hashing (a peer's pieces, checked as they arrived). None if
        the session did not answer within ``timeout``."""
        self.session.post_session_stats()
        found = []

        def look():
            found.extend(alert for alert in self.session.pop_alerts()
                         if isinstance(alert, self.lt.session_stats_alert))
            return found

        _waiter.wait(look, ready=bool, timeout=timeout, interval=0.05)
        if not found:
            return None
        values = found[0].values
        return {"read_back": int(values["disk.num_read_back"]),
                "hash_us": int(values["disk.disk_hash_time"])}

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
