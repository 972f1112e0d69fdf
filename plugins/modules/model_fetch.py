#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: model_fetch
short_description: Put a model's files in place, verified, from the Hub, a peer or a path
version_added: 0.2.0
author: gpufleet developers (@gpufleet)
description:
  - Does nothing when the directory is already verified for O(commit) (quick check).
  - Otherwise assembles the directory in a staging directory beside it (the unverified
    directory itself becomes the staging directory, so files already there are kept).
    Files the staging marker recorded as verified with the same size and mtime are kept
    without hashing; everything that is not part of the manifest is removed.
  - Checks the space before the first byte moves, needed (bytes still missing) against
    free, and refuses with both numbers.
  - Transfers what is missing, from O(source=hub) with huggingface_hub
    (C(hf_hub_download); a partial file left by a killed run is continued with a Range
    request, through huggingface_hub's C(http_get)), from O(source=peer) with
    C(rsync --partial --append-verify) from a peer's read-only rsync daemon, or from
    O(source=local) (a local or NFS path) with rsync.
  - Hashes every file not yet verified once, in parallel, against the manifest, writes
    the manifest and the verified marker (commit, per-file size and mtime), then renames
    the staging directory into place. What it did (source, bytes transferred and hashed,
    time) is kept in C(.<name>.last-fetch.json) beside the directory.
  - While it runs it writes files and bytes done, the rate and the ETA to O(progress_path)
    every second (M(gpufleet.sglang.model_wait) shows it).
  - From the Hub, each file is hashed while it is written (the manifest digest and the
    BitTorrent piece hashes from the same bytes); it is not read back to be hashed.
  - With O(swarm), the host takes part in the site's BitTorrent swarm (libtorrent, in this
    process only, for as long as the step runs); the seed publishes each file's piece
    hashes to the C(published) journal of O(swarm) as soon as it verified the file and serves it at once; a
    holder (a host verified already) serves its copy; a peer adds the records the
    controller appends to the C(inbox) journal of O(swarm) and libtorrent checks every piece as it arrives.
    Every host serves what it holds. The run ends when the inbox says stop, or when its lease ends.
requirements:
  - huggingface_hub (for O(source=hub))
  - rsync (for O(source=peer) without O(swarm), and O(source=local))
  - libtorrent (for O(swarm); Debian C(python3-libtorrent))
extends_documentation_fragment:
  - gpufleet.sglang._model
  - gpufleet.sglang._model.hub
  - gpufleet.sglang._model.progress
  - gpufleet.sglang._attributes
attributes:
  check_mode:
    support: partial
    details: Runs the quick check and the space check and reports what it would transfer.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  manifest:
    description:
      - The files of the commit (C(path), C(size), C(algo), C(digest)), as
        M(gpufleet.sglang.model_resolve) returns them.
    type: list
    elements: dict
    required: true
  source:
    description: Where the files come from.
    type: str
    choices: [hub, peer, local]
    default: hub
  token:
    description: Hub token; passed to huggingface_hub in memory only, never written.
    type: str
    default: ""
  peer:
    description: rsync URL of a peer's verified copy, C(rsync://host:port/module/).
    type: str
  swarm:
    description:
      - Take part in the site's swarm (see the description). Keys C(role) (C(seed),
        C(holder) or C(peer)), C(address) (this host's LAN address, where the engine
        listens), C(port), C(peers) (the LAN addresses of the site's swarm hosts; the only
        addresses admitted), C(feeder) (the address of the host whose records the site
        takes) and C(fetchers) (the addresses of the site's hosts that fetch; each takes
        its own slice of a file from the feeder, the rest from the others), C(session) (an
        id the controller's records carry), C(inbox), C(published) (journal paths), C(deadline) (seconds)
        and C(lease) (seconds, 0 or absent for none).
      - With a C(lease), the host's part ends on its own once, for that long, the inbox has not
        changed (the controller appends to it or touches it) and no byte has moved. A host
        that holds every file then ends as if stopped, any other fails with what it holds kept.
        A controller that dies before its stop then leaves no engine running, nor its port open,
        past the lease.
    type: dict
  source_path:
    description: Local or NFS directory to copy from (O(source=local)).
    type: path
  free_bytes:
    description: Free bytes to check against instead of the filesystem's (tests).
    type: int
  space_only:
    description: Only run the quick check and the space check; transfer nothing.
    type: bool
    default: false
  timeout:
    description: Seconds one rsync may run.
    type: int
    default: 86400
seealso:
  - module: gpufleet.sglang.model_check
  - module: gpufleet.sglang.model_resolve
  - module: gpufleet.sglang.model_wait
"""

EXAMPLES = r"""
- name: Download the model from a mirror (the site's seed)
  gpufleet.sglang.model_fetch:
    path: /models/org--name/main
    repo_id: org/name
    commit: "{{ model_resolved.commit }}"
    manifest: "{{ model_resolved.manifest }}"
    endpoint: http://mirror.example:8080
    token: "{{ model_hf_token }}"
  no_log: false
"""

RETURN = r"""
needed_bytes:
  description: Bytes that were still missing when the transfer started.
  type: int
  returned: always
free_bytes:
  description: Free bytes on the model's filesystem at the space check.
  type: int
  returned: always
bytes_transferred:
  description: Bytes received (for the Hub, file bytes; for rsync, its received total; for the swarm, the payload bytes).
  type: int
  returned: always
bytes_redundant:
  description:
    - The swarm's payload bytes that arrived twice, part of RV(bytes_transferred) (0 for the Hub and rsync).
    - In its end game libtorrent asks several peers for the last blocks and cancels the slower request;
      a block that arrives before the cancel is received again but written once.
    - RV(bytes_transferred) minus this is what the host received of the file's contents.
  type: int
  returned: always
resumed_from:
  description: Files continued from a partial copy, with the bytes that were already there.
  type: dict
  returned: always
hub_gets:
  description:
    - The byte ranges asked of the Hub (one GET each, retries of a cut one aside); each file
      comes in ranges, one file after another, so a swarm's peers start on it early.
  type: int
  returned: always
bytes_hashed:
  description: Bytes hashed in this run (while written, piece by piece as they arrived, or read back).
  type: int
  returned: always
bytes_read_to_hash:
  description: Bytes read back from disk only to hash them (a resumed partial file, a file rsync wrote).
  type: int
  returned: always
bytes_served:
  description: Bytes this host sent to the site's other hosts (swarm).
  type: int
  returned: always
engine_disk:
  description:
    - What the swarm engine did with the disk (libtorrent's session counters) - C(read_back),
      blocks of 16 KiB read back from disk to hash them (0 - a verified file is served as held,
      a received piece is checked as it arrives), and C(hash_us), microseconds spent hashing.
  type: dict
  returned: when the swarm ran
io:
  description: This process's I/O counters at the end (C(/proc/self/io)), e.g. C(read_bytes), C(rchar).
  type: dict
  returned: when the copy was placed
engine:
  description: The swarm engine and its version (empty without O(swarm)); with O(space_only), the engine this interpreter can import.
  type: str
  returned: always
transferred:
  description: Files transferred.
  type: list
  elements: str
  returned: always
removed:
  description: Leftovers removed from the staging directory (orphaned partial files, files of another commit).
  type: list
  elements: str
  returned: always
elapsed:
  description: Seconds the run took.
  type: float
  returned: always
"""

import os
import re
import shutil
import sys
import time
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _command, _weights
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _model
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _model_args, _model_hub
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _swarm, _swarm_step

RSYNC_RECEIVED = re.compile(r"Total bytes received:\s*([\d,]+)")


class End(object):
    """How a run's source ended, for :func:`settle`: the files verified (``good``: path ->
    (size, mtime_ns)) and what each was verified against, the piece records to keep beside
    the weights, whether the copy is whole (it is placed), whether the verified marker is
    written, and the failure's message, if any."""

    def __init__(self, good, against=None, records=None, whole=False, marker=True,
                 failure=None):
        self.good = good
        self.against = against or {}
        self.records = records
        self.whole = whole
        self.marker = marker
        self.failure = failure


class Copying(object):
    """The progress file of a copy from the Hub or by rsync (the swarm writes its own): every
    second while the copy runs, then its last figures."""

    def __init__(self, p, staging, manifest, result):
        self.result = result
        self.progress = None
        if p["progress_path"] and not p["swarm"]:
            self.progress = _model_hub.Progress(staging, manifest, p["progress_path"],
                                                _model.write_json, _model.progress_line).start()

    def finish(self, base):
        if self.progress:
            self.progress.finish({"transferred": len(self.result["transferred"])}, base)
            self.progress = None


def prepare_staging(path):
    """The staging directory, taking over an unverified directory at ``path``."""
    staging = _model.staging_path(path)
    if os.path.isdir(path) and not os.path.isdir(staging):
        os.rename(path, staging)
    elif os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(staging, exist_ok=True)
    return staging


def missing_files(staging, manifest, source):
    """Entries to transfer: absent or of the wrong size. A file larger than the manifest
    says is removed; a smaller one is kept for rsync to continue (--append-verify) and
    removed for the Hub (huggingface_hub continues only its own partial files)."""
    missing = []
    for item in manifest:
        full = os.path.join(staging, item["path"])
        size = os.path.getsize(full) if os.path.exists(full) else None
        if size == item["size"]:
            continue
        if size is not None and (size > item["size"] or source == "hub"):
            os.unlink(full)
        missing.append(item)
    return missing


def rsync(module, src, staging, paths, timeout):
    listing = os.path.join(os.path.dirname(staging), "." + os.path.basename(staging) + ".files")
    with open(listing, "w") as handle:
        handle.write("".join(p + "\n" for p in paths))
    argv = [module.get_bin_path("rsync", required=True), "-rt", "--partial", "--append-verify",
            "--stats", "--files-from=" + listing, src, staging + "/"]
    result = _command.run(module, argv, timeout=timeout)
    os.unlink(listing)
    if not result.ok:
        _command.fail(module, "rsync from %s failed" % src, result)
    match = RSYNC_RECEIVED.search(result.stdout)
    return int(match.group(1).replace(",", "")) if match else 0


# --- before any byte moves -----------------------------------------------------------------

def checked_manifest(module, p, result):
    if p["source"] == "peer" and not p["peer"] and not p["swarm"]:
        module.fail_json(msg="source is peer: peer (an rsync URL) or swarm is required", **result)
    manifest = None
    try:
        manifest = _model.check_manifest(p["manifest"], p["repo_id"], p["commit"])
    except _weights.ModelError as error:
        module.fail_json(msg=str(error), **result)
    return manifest


def ready(module, p, manifest, result, started):
    """(base, good, missing) of a run with something to do: a holder serves its verified
    directory; any other host assembles the staging directory. A run with nothing to do
    ends here: a verified directory, a space check refused or only asked for, check mode."""
    if p["swarm"] and p["swarm"].get("role") == "holder":
        if not _weights.quick_check(p["path"], p["commit"])["verified"]:
            module.fail_json(msg="%s: a holder must be verified for %s" % (p["path"], p["commit"]),
                             **result)
        return p["path"], _weights.marked(p["path"]), []
    if _weights.quick_check(p["path"], p["commit"])["verified"]:
        result["elapsed"] = time.time() - started
        module.exit_json(**result)
    staging = _model.staging_path(p["path"])
    base = staging if os.path.isdir(staging) else p["path"]
    partials = _model_hub.partial_sizes(base, manifest) if os.path.isdir(base) else {}
    present = _model.present_bytes(base, manifest, partials) if os.path.isdir(base) else 0
    try:
        result["needed_bytes"], result["free_bytes"] = _model.space_check(
            os.path.dirname(p["path"].rstrip("/")), manifest, present, p["free_bytes"])
    except _weights.ModelError as error:
        result.update(needed_bytes=getattr(error, "needed", 0), free_bytes=getattr(error, "free", 0))
        module.fail_json(msg="%s: %s" % (p["path"], error), **result)
    if p["space_only"] or module.check_mode:
        result["engine"] = _swarm.engine_version() or ""
        result["elapsed"] = time.time() - started
        module.exit_json(**result)
    result["changed"] = True
    staging = prepare_staging(p["path"])
    good = _weights.trusted(staging, p["commit"], manifest)
    result["removed"] = _model.clean_orphans(staging, manifest)
    missing = missing_files(staging, manifest, "hub" if p["source"] == "hub" else "peer")
    # the swarm's peers list what they received as it comes
    result["transferred"] = [item["path"] for item in missing] \
        if p["source"] == "hub" or not p["swarm"] else []
    return staging, good, missing


# --- the sources ---------------------------------------------------------------------------

def fetch(module, p, staging, manifest, good, missing, result, copying):
    """Every source behind one call: the swarm (with ``swarm``), else the Hub (each file
    hashed while written), a peer's rsync daemon or a local path; then each file not verified
    yet is read back and hashed. Returns the :class:`End` for :func:`settle`."""
    if p["swarm"]:
        return from_swarm(module, p, staging, manifest, good, missing, result)
    against, records = {}, _weights.load_pieces(staging)
    if missing and p["source"] == "hub":
        from_hub(p, staging, good, missing, result, against, records)
    elif missing:
        src = p["peer"] if p["source"] == "peer" else p["source_path"].rstrip("/") + "/"
        result["bytes_transferred"] = rsync(module, src, staging,
                                            [item["path"] for item in missing], p["timeout"])
    todo = [item for item in manifest if item["path"] not in good]
    new_good, bad, hashed_now = _weights.verify_files(staging, todo, p["workers"])
    result["bytes_hashed"] += hashed_now
    result["bytes_read_to_hash"] += hashed_now
    good.update(new_good)
    if bad:
        for rel in bad:
            if os.path.exists(os.path.join(staging, rel)):
                os.unlink(os.path.join(staging, rel))
        return End(good, against, failure=(
            "%d file(s) from %s did not match the manifest of %s at %s and were "
            "removed (the next run fetches them again): %s"
            % (len(bad), p["peer"] or p["source_path"] or p["endpoint"], p["repo_id"],
               p["commit"], "; ".join("%s: %s" % kv for kv in sorted(bad.items())))))
    for item in todo:
        if item["path"] in new_good:
            against[item["path"]] = _weights.read_back(item)
    # a rsync copy has no piece records (the next swarm from this host makes them)
    records = dict((k, v) for k, v in records.items() if k in good and k not in new_good)
    copying.finish(staging)
    return End(good, against, records, whole=True)


def from_hub(p, staging, good, missing, result, against, records):
    """The missing files from the Hub, each hashed while written: its piece record made
    from the same bytes."""
    resumed, cleaned, hashed, gets = _model_hub.download_hashing(
        staging, p["repo_id"], p["commit"], missing, p["endpoint"], p["token"],
        p["xet"], p["workers"])
    result["resumed_from"] = resumed
    result["hub_gets"] = sum(gets.values())
    result["removed"].extend(cleaned)
    result["bytes_transferred"] = sum(item["size"] - resumed.get(item["path"], 0)
                                      for item in missing)
    result["bytes_read_to_hash"] += sum(resumed.values())
    for item in missing:
        digest, plen, pieces = hashed[item["path"]]
        st = os.stat(os.path.join(staging, item["path"]))
        good[item["path"]] = (st.st_size, st.st_mtime_ns)
        records[item["path"]] = _weights.record(item, digest, plen, pieces, "hub")
        against[item["path"]] = _weights.against(records[item["path"]], "hub")
        result["bytes_hashed"] += item["size"]


def from_swarm(module, p, staging, manifest, good, missing, result):
    """This host's part in the site's swarm (``_swarm_step``), until the stop or its lease."""
    lt = _swarm.import_engine()
    if lt is None:
        return End({}, marker=False, failure="swarm: libtorrent is not importable by %s (install "
                                             "python3-libtorrent, or set model_engine: rsync)"
                                             % sys.executable)
    result["engine"] = "libtorrent " + str(lt.__version__)
    step = _swarm_step.Step(p, staging, manifest, good, p["progress_path"], result, lt)
    try:
        complete = step.run(missing)
    except (_weights.ModelError, _weights.SwarmError) as error:
        return End(step.good, step.against, failure="%s: %s" % (p["path"], error))
    if p["swarm"]["role"] == "holder":
        return End(step.good, step.against, step.records, marker=False)
    if not complete:
        lacking = [e["path"] for e in manifest if e["path"] not in step.good]
        return End(step.good, step.against, failure=(
            "%s: the swarm stopped before this host held every file (%d missing: %s); what it "
            "verified is kept for the next run" % (p["path"], len(lacking), ", ".join(lacking[:5]))))
    return End(step.good, step.against, step.records, whole=True)


# --- the end ---------------------------------------------------------------------------------

def settle(module, p, staging, manifest, end, result, started):
    """The end of every run that fetched: the one place the verified marker is written. A
    whole copy: the manifest, the piece records and the marker, then the one rename into
    place; a failed one: the marker of what was verified (the next run neither fetches nor
    hashes those again), then the failure; a holder: its piece records only."""
    if end.whole:
        _model.write_json(os.path.join(staging, _weights.MANIFEST),
                          {"repo_id": p["repo_id"], "commit": p["commit"], "files": manifest})
    if end.whole or end.records:
        _weights.save_pieces(staging, end.records)
    if end.marker:
        _weights.write_marker(staging, p["repo_id"], p["commit"], end.good, end.against)
    if end.whole:
        shutil.rmtree(os.path.join(staging, ".cache"), ignore_errors=True)
        _model.place(staging, p["path"])
    if end.failure:
        module.fail_json(msg=end.failure, **result)
    result["elapsed"] = time.time() - started
    result["io"] = _swarm.process_io()
    result["cpu_s"] = _swarm.process_cpu()
    if end.whole:
        _model.write_json(_model.last_fetch_path(p["path"]),
                          dict(result, source=p["source"], peer=p["peer"], commit=p["commit"],
                               finished_at=time.time()))


def failed(module, p, staging, result, error):
    """A copy's error with its message (a download error of any kind with the traceback)."""
    if isinstance(error, _weights.ModelError):
        module.fail_json(msg=str(error), **result)
    module.fail_json(msg="fetching %s into %s failed: %s" % (p["repo_id"], staging, error),
                     exception=traceback.format_exc(), **result)


def main():
    module = AnsibleModule(
        argument_spec=_model_args.args(
            _model_args.MODEL_DIR_ARGS, _model_args.HUB_ARGS, _model_args.PROGRESS_ARGS,
            manifest=dict(type="list", elements="dict", required=True),
            source=dict(type="str", default="hub", choices=["hub", "peer", "local"]),
            token=dict(type="str", default="", no_log=True),
            peer=dict(type="str"),
            swarm=dict(type="dict"),
            source_path=dict(type="path"),
            free_bytes=dict(type="int"),
            space_only=dict(type="bool", default=False),
            timeout=dict(type="int", default=86400),
        ),
        required_if=[("source", "local", ["source_path"])],
        supports_check_mode=True,
    )
    p = module.params
    started = time.time()
    result = dict(changed=False, needed_bytes=0, free_bytes=0, bytes_transferred=0, bytes_redundant=0,
                  resumed_from={}, hub_gets=0, bytes_hashed=0, bytes_read_to_hash=0, bytes_served=0,
                  transferred=[], removed=[], elapsed=0.0, engine="")
    manifest = checked_manifest(module, p, result)
    staging, good, missing = ready(module, p, manifest, result, started)
    copying = Copying(p, staging, manifest, result)
    try:
        settle(module, p, staging, manifest,
               fetch(module, p, staging, manifest, good, missing, result, copying), result, started)
    except Exception as error:  # a copy's error is reported here; the swarm's ends its run
        if p["swarm"]:
            raise
        failed(module, p, staging, result, error)
    finally:
        copying.finish(p["path"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
