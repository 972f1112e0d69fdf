# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The Hub side of the model step, through the real huggingface_hub client.

- :func:`resolve` (controller, once for the fleet): a branch or tag to the 40-hex commit
  and the tree listing at that commit as the manifest; refuses an unknown repo or
  revision, a 401/403 (naming the token variable, never its value) and a mirror that
  advertises Xet without serving it.
- :func:`download` (the seed host): the missing files of the manifest into the staging
  directory with ``hf_hub_download``. huggingface_hub restarts a file from zero after a
  killed process (it leaves ``<hash>.<etag>.<id>.incomplete`` behind); a partial file
  like that is continued here with huggingface_hub's own ``http_get(resume_size=...)``,
  a ``Range`` request, and every other orphan is removed.

huggingface_hub reads ``HF_ENDPOINT`` and ``HF_HUB_DISABLE_XET`` when it is imported, so
:func:`environment` sets them before the first import.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _weights
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights._model import (
    GIT_SHA1, ModelError, check_manifest, is_commit, manifest_from_tree)

TOKEN_VAR = "model_hf_token"


def environment(endpoint, xet):
    """Set what huggingface_hub reads at import time (before importing it)."""
    if endpoint:
        os.environ["HF_ENDPOINT"] = endpoint.rstrip("/")
    os.environ["HF_HUB_DISABLE_XET"] = "0" if xet else "1"
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ.pop("HF_HUB_OFFLINE", None)


def _refusal(error, repo_id, revision, endpoint, token):
    """A ModelError for a huggingface_hub error: names the input, never the token."""
    from huggingface_hub import errors
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, errors.RevisionNotFoundError):
        return ModelError("model_revision %r of model_repo %s is not on %s (404 "
                          "RevisionNotFound): expected a branch, tag or 40-hex commit of "
                          "that repo" % (revision, repo_id, endpoint))
    if status in (401, 403) or isinstance(error, errors.GatedRepoError):
        return ModelError(
            "%s answered %s for model_repo %s: %s (%s is %s); nothing was downloaded"
            % (endpoint, status, repo_id,
               "the token was refused" if token else "the repo needs a token",
               TOKEN_VAR, "set (value not shown)" if token else "empty"))
    if isinstance(error, errors.RepositoryNotFoundError):
        return ModelError("model_repo %s is not on %s (404 RepoNotFound): expected "
                          "'<org>/<name>' of an existing repo" % (repo_id, endpoint))
    return ModelError("%s failed for model_repo %s at %r: %s" % (endpoint, repo_id, revision,
                                                                 error))


def resolve(endpoint, repo_id, revision, token="", xet=False, allow=None, want_tree=True):
    """(commit, manifest or None, xet_advertised). One request for a branch or tag."""
    environment(endpoint, xet)
    from huggingface_hub import HfApi, errors
    api = HfApi(endpoint=endpoint, token=token or False)
    try:
        commit = revision if is_commit(revision) else api.model_info(
            repo_id, revision=revision).sha
        if not want_tree:
            return commit, None, False
        tree = list(api.list_repo_tree(repo_id, revision=commit, recursive=True))
    except (errors.HfHubHTTPError, errors.RepositoryNotFoundError) as error:
        raise _refusal(error, repo_id, revision, endpoint, token)
    entries = []
    xet_advertised = False
    for item in tree:
        if not hasattr(item, "size"):  # a folder
            continue
        lfs = {"oid": item.lfs.sha256} if item.lfs else None
        entries.append({"type": "file", "path": item.path, "size": item.size,
                        "oid": item.blob_id, "lfs": lfs})
        xet_advertised = xet_advertised or bool(getattr(item, "xet_hash", None))
    manifest = check_manifest(manifest_from_tree(entries, allow), repo_id, commit)
    if xet_advertised and xet:
        _check_xet_served(api, endpoint, repo_id, commit, token)
    return commit, manifest, xet_advertised


def _check_xet_served(api, endpoint, repo_id, commit, token):
    """The Xet read-token route must answer when Xet is used; refuse early otherwise."""
    from huggingface_hub.utils import build_hf_headers, get_session
    url = "%s/api/models/%s/xet-read-token/%s" % (endpoint.rstrip("/"), repo_id, commit)
    response = get_session().get(url, headers=build_hf_headers(token=token or False))
    if response.status_code >= 400:
        raise ModelError(
            "%s advertises Xet storage for model_repo %s but does not serve it (%s answered "
            "%d): set model_xet: false (the client then runs with HF_HUB_DISABLE_XET=1 and "
            "downloads over plain HTTP)" % (endpoint, repo_id, url, response.status_code))


def plan_before_transfer(endpoint, repo_id, commit, token, capacity):
    """Plan the GPU memory from the commit's config.json, fetched alone, before any weight moves.

    ``capacity`` holds ``strategy``, ``gpu_count``, ``gpu_memory_mib`` and optionally
    ``nnodes``, ``mem_fraction_static``, ``context_length``, ``kv_dtype``, ``extra_args``,
    ``allow_unfit``: the same planner and verdict as the server's preflight. Returns the
    plan; raises ModelError when the strategy cannot run or does not fit.
    """
    import tempfile
    from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _preflight
    from huggingface_hub import errors, hf_hub_download
    folder = tempfile.mkdtemp(prefix="gpufleet-model-config.")
    try:
        hf_hub_download(repo_id, "config.json", revision=commit, local_dir=folder,
                        endpoint=endpoint, token=token or False)
    except (errors.HfHubHTTPError, errors.RepositoryNotFoundError) as error:
        raise _refusal(error, repo_id, commit, endpoint, token)
    nnodes = int(capacity.get("nnodes") or 1)
    try:
        layout = _preflight.fit_layout(capacity["strategy"], None, capacity["gpu_count"], nnodes,
                                       "the fleet")
        settings = {"gpu_count": capacity["gpu_count"],
                    "gpu_memory_mib": capacity["gpu_memory_mib"], "nnodes": nnodes,
                    "mem_fraction_static": float(capacity.get("mem_fraction_static") or 0.0),
                    "context_length": int(capacity.get("context_length") or 0),
                    "kv_dtype": capacity.get("kv_dtype") or "auto"}
        plan, _warnings = _preflight.plan(folder, layout, settings,
                                          capacity.get("extra_args") or {})
        _preflight.judge_plan(plan, "the fleet", bool(capacity.get("allow_unfit")))
    except _preflight.PreflightError as error:
        raise ModelError("refused before the transfer (planned from %s's config.json at %s): %s"
                         % (repo_id, commit, error))
    finally:
        import shutil
        shutil.rmtree(folder, ignore_errors=True)
    return plan


def _orphans(staging, item):
    """huggingface_hub's partial files of this manifest entry (any process, any id)."""
    folder = os.path.join(staging, ".cache", "huggingface", "download",
                          os.path.dirname(item["path"]))
    return sorted(glob.glob(os.path.join(folder, "*.%s.*.incomplete" % item["digest"])),
                  key=os.path.getsize, reverse=True)


def partial_sizes(staging, manifest):
    """path -> bytes of the largest partial file that can be continued."""
    sizes = {}
    for item in manifest:
        found = _orphans(staging, item)
        if found:
            sizes[item["path"]] = min(os.path.getsize(found[0]), item["size"])
    return sizes


def _resumable(staging, missing):
    """(path -> the partial file a download of ``missing`` continues, the partial files
    removed): the largest partial file of an entry is kept when it holds some bytes and no
    more than the entry's size; every other partial file is removed."""
    resumable = {}
    for item in missing:
        found = _orphans(staging, item)
        if found and 0 < os.path.getsize(found[0]) <= item["size"]:
            resumable[item["path"]] = found[0]
    return resumable, clean_partials(staging, set(resumable.values()))


def clean_partials(staging, keep):
    """Remove every huggingface_hub partial file except those in ``keep``."""
    removed = []
    for path in glob.glob(os.path.join(staging, ".cache", "huggingface", "download", "**",
                                       "*.incomplete"), recursive=True):
        if path not in keep:
            os.unlink(path)
            removed.append(os.path.relpath(path, staging))
    return removed


class Progress(object):
    """Writes files/bytes done, rate and ETA of a transfer into a JSON file every second.

    Bytes are what the staging directory holds (whole files and partial ones), so the
    figure is right whichever client writes them (huggingface_hub or rsync).
    """

    def __init__(self, staging, manifest, path, write_json, line):
        self.staging = staging
        self.manifest = manifest
        self.path = path
        self.write_json = write_json
        self.line = line
        self.started = time.time()
        self.initial = None
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop)
        self.thread.daemon = True

    def sample(self):
        done_files, done_bytes = 0, 0
        for item in self.manifest:
            full = os.path.join(self.staging, item["path"])
            size = os.path.getsize(full) if os.path.exists(full) else 0
            if size == 0:
                found = _orphans(self.staging, item)
                size = os.path.getsize(found[0]) if found else 0
                rsync_partial = os.path.join(os.path.dirname(full),
                                             "." + os.path.basename(full))
                for candidate in glob.glob(rsync_partial + ".*"):
                    size = max(size, os.path.getsize(candidate))
            elif size == item["size"]:
                done_files += 1
            done_bytes += min(size, item["size"])
        if self.initial is None:
            self.initial = done_bytes
        elapsed = time.time() - self.started
        total = sum(i["size"] for i in self.manifest)
        rate = (done_bytes - self.initial) / elapsed if elapsed > 0 else 0
        return {"pid": os.getpid(), "files_done": done_files, "files": len(self.manifest),
                "bytes_done": done_bytes, "bytes": total, "rate_bps": rate,
                "eta_s": (total - done_bytes) / rate if rate > 0 else None,
                "elapsed_s": elapsed, "finished": False,
                "line": self.line(done_files, len(self.manifest), done_bytes - self.initial,
                                  total - self.initial, elapsed)}

    def _loop(self):
        while not self.stop_event.wait(1.0):
            try:
                self.write_json(self.path, self.sample())
            except OSError:
                pass

    def start(self):
        self.write_json(self.path, self.sample())
        self.thread.start()
        return self

    def finish(self, result, base=None):
        """The last figures, from ``base`` (the placed directory) when the staging one is gone."""
        self.stop_event.set()
        self.thread.join(5)
        if base and not os.path.isdir(self.staging):
            self.staging = base
        data = self.sample()
        data.update(finished=True, result=result)
        self.write_json(self.path, data)


RANGE_MIN = 1 << 20
RANGE_MAX = 32 << 20


def range_bytes(size, workers):
    """The size of one GET of a file: a power of two near a quarter of the file's share per
    connection, between RANGE_MIN and RANGE_MAX. Small enough that the file grows on disk
    as a prefix while ``workers`` connections fetch it (a kill leaves one to continue) and
    that a range held in memory stays small; large enough that a 9 GB shard takes about
    300 GETs, not thousands."""
    target = size // (4 * max(1, int(workers)))
    length = RANGE_MIN
    while length < RANGE_MAX and length * 2 <= target:
        length *= 2
    return length


def download_order(entries):
    """The order of the Hub download: the files git keeps itself (configs, code, tokenizer
    texts: ``git-sha1`` in the manifest, small) first, then the LFS files (the weights), each
    group in the manifest's order. A swarm's seed publishes each file once it is whole and
    the controller hands out what it published in batches, a module run per batch and peer:
    in the manifest's order the index and tokenizer files came after the last-but-one
    shard, were whole 0.3 s before the last one, and their batch held the last shard's
    record back (on 8 hosts at 6 MiB/s it reached the peers 4.5-6.3 s after the seed
    verified it, the shards before it 0.6-3.4 s)."""
    return sorted(entries, key=lambda entry: entry["algo"] != GIT_SHA1)


def ranges(have, size, chunk):
    """The (start, end) byte ranges (end inclusive) of what is left of a file of ``size``
    bytes that holds ``have``: ``chunk`` bytes each, the last one shorter."""
    return [(start, min(start + chunk, size) - 1) for start in range(have, size, chunk)]


class OrderedFile(object):
    """One file of an ordered download. Its ranges arrive at once; the bytes reach the file
    and the hasher in order: the range that holds the file's next byte writes straight
    through as its bytes come, the later ones wait in memory until it is whole. So the
    partial file grows as a prefix (a killed run leaves one a later run continues, and the
    progress shows the bytes as they come), and the hasher reads no byte back."""

    def __init__(self, item, partial, target, have, hasher):
        self.item = item
        self.partial = partial
        self.target = target
        self.hasher = hasher
        self.next = have
        self.sinks = []
        self.lock = threading.Lock()
        self.handle = None

    def sink(self, start, end):
        sink = RangeSink(self, start, end)
        self.sinks.append(sink)
        return sink

    def _open(self):
        if self.handle is None:
            self.handle = open(self.partial, "ab")
        return self.handle

    def _write(self, data):
        self._open()
        self.hasher.update(data)
        self.handle.write(data)
        self.next += len(data)

    def feed(self, sink, data):
        with self.lock:
            if sink.start + sink.written == self.next and not sink.held:
                self._write(data)
                sink.written += len(data)
            else:
                sink.held.append(data)

    def done(self, sink):
        """A range is whole. Returns (ranges written out by now that were not before: the
        caller frees that many slots, whether the file is whole)."""
        with self.lock:
            sink.complete = True
            freed = 0
            while self.sinks:
                head = self.sinks[0]
                if head.held and head.start + head.written == self.next:
                    for data in head.held:  # its turn: out with what it held
                        self._write(data)
                        head.written += len(data)
                    head.held = []  # and straight through from now on
                if not (head.complete and head.written == head.size):
                    break
                self.sinks.pop(0)
                freed += 1
            return freed, not self.sinks

    def close(self):
        """Flush and close what was written (a file whose bytes were all there before, or
        an empty one, was never opened: the partial file is created empty for it)."""
        handle = self._open()
        handle.flush()
        os.fsync(handle.fileno())
        handle.close()


class RangeSink(object):
    """What huggingface_hub's ``http_get`` writes one range into (a file object to it)."""

    def __init__(self, owner, start, end):
        self.owner = owner
        self.start = start
        self.size = end - start + 1
        self.received = 0
        self.written = 0
        self.held = []
        self.complete = False

    def write(self, data):
        self.owner.feed(self, data)
        self.received += len(data)
        return len(data)

    def tell(self):
        return self.received

    def seek(self, *_args):
        # http_get goes back only when a server answered a resumed range with the whole
        # file (200 instead of 206): bytes written through cannot be taken back
        raise ModelError("%s: the server ignored a byte range on a retry; run the step again"
                         % self.owner.item["path"])

    truncate = seek


def download_hashing(staging, repo_id, commit, missing, endpoint, token="", xet=False,
                     workers=4, on_file=None, stream_hash=None, chunk=None):
    """Put ``missing`` manifest entries into ``staging``, hashing each file while it is
    written: no second read.

    The files come one after another (:func:`download_order`: git's small files, then the
    LFS files, each in the manifest's order), each in ranges of ``chunk``
    bytes (:func:`range_bytes` of its size unless given) fetched by ``workers`` connections
    at once (one HEAD per file, one GET per range),
    so the first file is whole and published (``on_file``) after its own bytes, not after
    ``workers`` files' worth: a swarm's peers start on it while the rest downloads. A range
    that arrives early waits in memory for the ones before it (at most ``2 * workers``
    ranges are in flight or waiting), so the bytes reach the file and the hasher in order.

    ``stream_hash(algo, size)`` makes the hasher (``_weights.StreamHash``: the manifest digest
    and the piece hashes from the same bytes). A partial file left by a killed run is
    continued from its end after its bytes were fed to the hasher (the one read of bytes a
    process that is gone wrote). A file whose digest differs from the manifest is removed
    and raises. ``on_file(item, hasher_result)`` runs as each file is in place. Returns
    (resumed_from, removed, hashed, gets) where ``hashed`` maps path -> (digest, piece
    length, pieces) and ``gets`` path -> the ranges asked for (GETs, retries aside).
    """
    environment(endpoint, xet)
    from huggingface_hub import errors, hf_hub_url
    from huggingface_hub.file_download import get_hf_file_metadata, http_get
    from huggingface_hub.utils import build_hf_headers

    missing = download_order(missing)
    resumable, removed = _resumable(staging, missing)
    resumed_from = {}
    hashed = {}
    gets = {}
    lock = threading.Lock()
    workers = max(1, int(workers))
    slots = threading.Semaphore(2 * workers)
    failed = []
    make = stream_hash or _weights.StreamHash
    headers = build_hf_headers(token=token or False)

    def opened(item):
        """The file's state and its ranges (the metadata HEAD first, as hf_hub_download)."""
        url = hf_hub_url(repo_id, item["path"], revision=commit, endpoint=endpoint)
        meta = get_hf_file_metadata(url, token=token or False)
        hasher = make(item["algo"], item["size"])
        partial = resumable.get(item["path"])
        have = 0
        if partial:
            have = _weights.hash_existing(partial, hasher)
            resumed_from[item["path"]] = have
        else:
            folder = os.path.join(staging, ".cache", "huggingface", "download",
                                  os.path.dirname(item["path"]))
            os.makedirs(folder, exist_ok=True)
            partial = os.path.join(folder, "%s.%s.%d.incomplete" % (
                os.path.basename(item["path"]), item["digest"], os.getpid()))
        state = OrderedFile(item, partial, os.path.join(staging, item["path"]), have, hasher)
        # every range's sink exists before the first is fetched: the file is whole when
        # none is left
        parts = ranges(have, item["size"], chunk or range_bytes(item["size"], workers))
        gets[item["path"]] = len(parts)
        return state, meta.location or url, [state.sink(start, end) for start, end in parts]

    def finish(state):
        state.close()
        item, hasher = state.item, state.hasher
        digest, pieces, problem = _weights.streamed(hasher, item)
        if problem:
            os.unlink(state.partial)
            raise ModelError("%s from %s: %s (removed; the next run fetches it again)"
                             % (item["path"], endpoint, problem))
        os.makedirs(os.path.dirname(state.target) or staging, exist_ok=True)
        os.replace(state.partial, state.target)
        with lock:
            hashed[item["path"]] = (digest, hasher.plen, pieces)
        if on_file:
            on_file(item, hashed[item["path"]])

    def fetch(job):
        state, url, sink = job
        try:
            if failed:
                return
            http_get(url, sink, headers=dict(headers, Range="bytes=%d-%d" % (
                sink.start, sink.start + sink.size - 1)), expected_size=sink.size)
            freed, whole = state.done(sink)
            for _i in range(freed):
                slots.release()
            if whole:
                finish(state)
        except BaseException:
            failed.append(True)
            slots.release()
            raise

    def jobs():
        """Every range of every file, in order; a slot is taken before each is handed out."""
        for item in missing:
            if failed:
                return
            state, url, sinks = opened(item)
            states.append(state)
            if not sinks:  # a partial file that holds every byte already, or an empty file
                finish(state)
                continue
            for sink in sinks:
                slots.acquire()
                if failed:
                    return
                yield state, url, sink

    states = []
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(fetch, job) for job in jobs()]
            for future in futures:
                future.result()
    except (errors.HfHubHTTPError, errors.RepositoryNotFoundError) as error:
        raise _refusal(error, repo_id, commit, endpoint, token)
    finally:
        for state in states:  # a failed run leaves each partial file a prefix, closed
            if state.handle is not None and not state.handle.closed:
                state.handle.close()
    return resumed_from, removed, hashed, gets
