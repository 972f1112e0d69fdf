# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""One host's part in the model step's swarm (``model_fetch`` with ``swarm``).

- seed: downloads the missing files from the Hub, hashing each while it writes it
  (``_model_hub.download_hashing``); each verified file is published (its record appended
  to the ``published`` journal, which the controller reads) and served at once;
- holder: a host verified already serves its copy, from the piece hashes kept beside the
  weights (``common/_weights.py``'s ``PIECES``);
- peer: adds the records the controller appends to the ``inbox`` journal; libtorrent checks
  every piece as it arrives; nothing is read back to be hashed.

Every host keeps serving until the inbox says stop (the controller does when every host of
the site holds every file, or when the step fails), or until its lease ends (``_lease``: no
word from the controller and no byte moved for ``lease`` seconds; a controller that died
sends no stop). Then the session is closed (its port with it), the marker written (what
each file was verified against) and, when the host holds every file, the staging directory
moved into place.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import socket
import threading
import time

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files, _weights
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _model
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _lease, _model_hub, _swarm


class Step(object):
    """The loop of one host: publish, serve, fetch, report progress, until stop."""

    def __init__(self, params, base, manifest, good, progress_path, result, lt):
        sw = params["swarm"]
        self.p = params
        self.sw = sw
        self.role = sw["role"]
        self.base = base
        self.manifest = manifest
        self.by_path = dict((e["path"], e) for e in manifest)
        self.good = dict(good)
        self.against = {}
        self.result = result
        self.progress_path = progress_path
        self.host = socket.gethostname()
        self.session = str(sw["session"])
        self.records = {}
        self.published = 0
        self.queue = []
        self.lock = threading.Lock()
        self.failure = None
        self.stop = False
        self.inbox_seen = 0
        self.inbox_size = None
        self.inbox_mark = None  # the inbox's (size, mtime): any change is word from the controller
        self.progress_written = (None, 0.0)  # what the last progress file said, and when
        self.started = time.time()
        self.lease = _lease.Lease(sw.get("lease") or 0, time.monotonic())  # not the wall clock
        self.initial = None
        self.downloader = None
        self.lt = lt
        # per file, when this host verified it (seed), got its record (peer), held its
        # slice (peer, "sliced"), asked the feeder again after a stall (peer) and held the
        # file (peer): seconds since the step started, kept in the host's last-fetch record
        self.events = result.setdefault("events", [])
        self.seen = {"sliced": 0, "stalled": 0}  # the swarm's moves and stalls reported
        self.swarm = _swarm.Swarm(lt, sw["address"], int(sw["port"]), sw.get("peers") or [],
                                  sw.get("peers") or [], feeder=sw.get("feeder"),
                                  fetchers=sw.get("fetchers") or ())

    def _event(self, what, path):
        self.events.append([round(time.time() - self.started, 3), what, path])

    # --- what this host holds -------------------------------------------------------
    def _stat(self, path):
        st = os.stat(os.path.join(self.base, path))
        return (st.st_size, st.st_mtime_ns)

    def _held(self, path):
        """(size, mtime) of a file libtorrent finished, or None while its bytes are not all
        on disk yet: libtorrent reports a piece once it passed its check, which it can run
        on blocks it has not written yet (a file of one piece was not there yet, 1 in 10
        runs on loopback). The marker's mtimes are taken again once the session closed."""
        try:
            st = os.stat(os.path.join(self.base, path))
        except FileNotFoundError:
            return None
        if st.st_size != self.by_path[path]["size"]:
            return None
        return (st.st_size, st.st_mtime_ns)

    def _publish(self, rec, serve=True):
        self.records[rec["path"]] = rec
        _files.append_line(self.sw["published"], {"session": self.session, "record": rec})
        self.published += 1
        if serve:
            self.swarm.add(rec, os.path.dirname(os.path.join(self.base, rec["path"])), seed=True)

    def publish_held(self):
        """Serve (and, as feeder, publish) the files this host verified before."""
        kept = _weights.load_pieces(self.base)
        for entry in self.manifest:
            path = entry["path"]
            if path not in self.good:
                continue
            if entry["size"] == 0:
                continue
            rec = kept.get(path)
            if not rec or rec.get("digest") != entry["digest"]:
                if self.role == "peer":
                    continue  # a peer serves only what it holds records for
                rec = _weights.own_record(self.base, entry, self.host)
                self.result["bytes_hashed"] += entry["size"]
                self.result["bytes_read_to_hash"] += entry["size"]
            if self.role in ("seed", "holder"):
                self._publish(rec)
            else:
                self.records[path] = rec
                self.swarm.add(rec, os.path.dirname(os.path.join(self.base, path)), seed=True)

    def zero_sized(self):
        for entry in self.manifest:
            if entry["size"] == 0 and entry["path"] not in self.good and _weights.empty_ok(entry):
                full = os.path.join(self.base, entry["path"])
                os.makedirs(os.path.dirname(full), exist_ok=True)
                _files.write_atomic(full, b"")
                self.good[entry["path"]] = self._stat(entry["path"])
                self.against[entry["path"]] = "%s:%s (empty)" % (entry["algo"], entry["digest"])

    # --- the seed's download --------------------------------------------------------
    def start_download(self, missing):
        p = self.p

        def on_file(item, hashed):
            with self.lock:
                self.queue.append((item, hashed))

        def run():
            try:
                resumed, cleaned, _hashed, gets = _model_hub.download_hashing(
                    self.base, p["repo_id"], p["commit"], missing, p["endpoint"], p["token"],
                    p["xet"], p["workers"], on_file=on_file)
                self.result["resumed_from"] = resumed
                self.result["hub_gets"] = sum(gets.values())
                self.result["removed"].extend(cleaned)
                self.result["bytes_read_to_hash"] += sum(resumed.values())
                self.result["bytes_transferred"] = sum(
                    item["size"] - resumed.get(item["path"], 0) for item in missing)
            except Exception as error:  # reported by the loop, with its message
                self.failure = error

        self.downloader = threading.Thread(target=run)
        self.downloader.daemon = True
        self.downloader.start()

    def drain(self):
        with self.lock:
            items, self.queue = self.queue, []
        for item, (digest, plen, pieces) in items:
            rec = _weights.record(item, digest, plen, pieces, self.host)
            self.good[item["path"]] = self._stat(item["path"])
            self.against[item["path"]] = _weights.against(rec, "hub")
            self.result["bytes_hashed"] += item["size"]
            self._publish(rec)
            self._event("verified", item["path"])
        if items:
            self.keep()

    def keep(self):
        """The staging marker after each verified file: a killed run keeps them (the next
        one neither fetches nor hashes them again)."""
        if self.role != "holder":
            _weights.write_marker(self.base, self.p["repo_id"], self.p["commit"], self.good,
                                  self.against)
            _weights.save_pieces(self.base, self.records)

    # --- the peer's inbox ----------------------------------------------------------
    def read_inbox(self):
        try:
            st = os.stat(self.sw["inbox"])
            size, self.inbox_mark = st.st_size, (st.st_size, st.st_mtime_ns)
        except OSError:
            size, self.inbox_mark = None, None
        if size == self.inbox_size:
            return  # nothing appended since the last look (the loop looks 4 times a second)
        self.inbox_size = size
        lines = [line for line in _files.read_lines(self.sw["inbox"])
                 if line.get("session") == self.session]
        for line in lines[self.inbox_seen:]:
            if line.get("stop"):
                self.stop = True
            for rec in line.get("add") or []:
                path = rec.get("path")
                if path in self.records:
                    continue
                _weights.check_record(rec, self.by_path)
                self.records[path] = rec
                if path not in self.good:
                    self.swarm.add(rec, os.path.dirname(os.path.join(self.base, path)))
                    self._event("record", path)
        self.inbox_seen = len(lines)

    def collect(self):
        """Files libtorrent finished (every piece checked as it arrived)."""
        for path in self.swarm.moved[self.seen["sliced"]:]:
            self._event("sliced", path)  # held its slice, added again without the feeder
        for path in self.swarm.stalled[self.seen["stalled"]:]:
            self._event("stalled", path)  # asked the feeder again (_swarm.STALL_S)
        self.seen = {"sliced": len(self.swarm.moved), "stalled": len(self.swarm.stalled)}
        state = self.swarm.state()
        in_flight = 0
        before = len(self.good)
        for path, (finished, done, _payload, _total, _twice) in state.items():
            if path in self.good:
                continue
            held = self._held(path) if finished else None
            if held is not None:
                self.good[path] = held
                self.against[path] = _weights.against(self.records[path], "peer")
                self.result["bytes_hashed"] += self.by_path[path]["size"]
                self.result["transferred"].append(path)
                self._event("held", path)
            else:
                in_flight += done
        if len(self.good) > before:
            self.keep()
        errors = self.swarm.errors()
        if errors:
            raise _model.ModelError("the swarm engine reported: %s" % "; ".join(
                "%s: %s" % kv for kv in sorted(errors.items())))
        return in_flight

    def complete(self):
        return all(e["path"] in self.good for e in self.manifest)

    def progress(self, in_flight):
        done_bytes = sum(self.by_path[p]["size"] for p in self.good) + in_flight
        if self.role == "seed":
            done_bytes += sum(_model_hub.partial_sizes(self.base, [
                e for e in self.manifest if e["path"] not in self.good]).values())
        total = _model.total_bytes(self.manifest)
        if self.initial is None:
            self.initial = done_bytes
        elapsed = time.time() - self.started
        moved = done_bytes - self.initial
        rate = moved / elapsed if elapsed > 0 else 0.0
        data = {"pid": os.getpid(), "session": self.session, "role": self.role,
                "files_done": len(self.good), "files": len(self.manifest),
                "bytes_done": done_bytes, "bytes": total, "rate_bps": rate,
                "eta_s": (total - done_bytes) / rate if rate > 0 else None,
                "elapsed_s": elapsed, "published": self.published,
                "complete": self.complete(), "finished": False,
                "line": "%s%s" % (_model.progress_line(len(self.good), len(self.manifest),
                                                       moved, total - self.initial, elapsed),
                                  " (swarm %s)" % self.role)}
        if self.complete() and "complete_at" not in self.result:
            self.result["complete_at"] = time.time()
        # written when a file is done or published, or a second after the last write
        said = (data["files_done"], data["published"], data["complete"])
        if self.progress_path and (said != self.progress_written[0]
                                   or time.time() - self.progress_written[1] >= 1.0):
            try:
                _files.write_json(self.progress_path, data)
                self.progress_written = (said, time.time())
            except OSError:
                pass
        return done_bytes

    def run(self, missing):
        deadline = self.started + float(self.sw.get("deadline") or 86400)
        self.zero_sized()
        self.publish_held()
        if self.role == "seed" and missing:
            self.start_download(missing)
        try:
            while True:
                self.drain()
                self.read_inbox()
                self.swarm.tick()
                in_flight = self.collect()
                done_bytes = self.progress(in_flight)
                now = time.monotonic()
                self.lease.look(now, self.inbox_mark, (done_bytes, self.swarm.payload_sent()))
                if self.failure is not None:
                    raise self.failure
                if self.stop:
                    self.result["stop_at"] = time.time()
                    break
                if self.lease.expired(now):
                    self.result["lease_expired"] = True
                    if not self.complete():
                        raise _model.ModelError(self.lease.message(now))
                    self.result["stop_at"] = time.time()  # holds every file: ends as if stopped
                    break
                if time.time() > deadline:
                    raise _model.ModelError("the swarm ran past its deadline (%ss) without the "
                                            "controller's stop" % self.sw.get("deadline"))
                time.sleep(0.25)
        finally:
            # one last look (the loop's may be a quarter second old): state() reads it too
            self.result["bytes_served"] = self.swarm.served()
            self.result["lease"] = self.lease.report(time.monotonic())
            self.result["engine_disk"] = self.swarm.disk_counters()
            state = self.swarm.state()
            if self.role == "peer":
                self.result["bytes_transferred"] += sum(v[2] for v in state.values())
                self.result["bytes_redundant"] += sum(v[4] for v in state.values())
            self.swarm.close()
            self.result["closed_at"] = time.time()
        # libtorrent closed the files: the mtimes the marker records are final
        for path in list(self.good):
            self.good[path] = self._stat(path)
        return self.complete()
