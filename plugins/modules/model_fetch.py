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
requirements:
  - huggingface_hub (for O(source=hub))
  - rsync (for O(source=peer) and O(source=local))
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
  description: Bytes received (for the Hub, file bytes; for rsync, its received total).
  type: int
  returned: always
resumed_from:
  description: Files continued from a partial copy, with the bytes that were already there.
  type: dict
  returned: always
bytes_hashed:
  description: Bytes hashed in this run.
  type: int
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
import time
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.sglang.plugins.module_utils import _command, _model, _model_args
from ansible_collections.gpufleet.sglang.plugins.module_utils import _model_hub

RSYNC_RECEIVED = re.compile(r"Total bytes received:\s*([\d,]+)")


def prepare_staging(path):
    """The staging directory, taking over an unverified directory at ``path``."""
    staging = _model.staging_path(path)
    if os.path.isdir(path) and not os.path.isdir(staging):
        os.rename(path, staging)
    elif os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(staging, exist_ok=True)
    return staging


def trusted(staging, commit, manifest):
    """Files of ``staging`` that were hashed before (marker of the same commit, same size and
    mtime): not hashed again."""
    marker = _model.read_json(os.path.join(staging, _model.MARKER)) or {}
    if marker.get("commit") != commit:
        return {}
    good = {}
    for item in manifest:
        rec = (marker.get("files") or {}).get(item["path"])
        try:
            st = os.stat(os.path.join(staging, item["path"]))
        except OSError:
            continue
        if rec and st.st_size == rec["size"] == item["size"] and st.st_mtime_ns == rec["mtime_ns"]:
            good[item["path"]] = (st.st_size, st.st_mtime_ns)
    return good


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


def main():
    module = AnsibleModule(
        argument_spec=_model_args.args(
            _model_args.MODEL_DIR_ARGS, _model_args.HUB_ARGS, _model_args.PROGRESS_ARGS,
            manifest=dict(type="list", elements="dict", required=True),
            source=dict(type="str", default="hub", choices=["hub", "peer", "local"]),
            token=dict(type="str", default="", no_log=True),
            peer=dict(type="str"),
            source_path=dict(type="path"),
            free_bytes=dict(type="int"),
            space_only=dict(type="bool", default=False),
            timeout=dict(type="int", default=86400),
        ),
        required_if=[("source", "peer", ["peer"]), ("source", "local", ["source_path"])],
        supports_check_mode=True,
    )
    p = module.params
    started = time.time()
    result = dict(changed=False, needed_bytes=0, free_bytes=0, bytes_transferred=0,
                  resumed_from={}, bytes_hashed=0, transferred=[], removed=[], elapsed=0.0)
    try:
        manifest = _model.check_manifest(p["manifest"], p["repo_id"], p["commit"])
    except _model.ModelError as error:
        module.fail_json(msg=str(error), **result)
    if _model.quick_check(p["path"], p["commit"])["verified"]:
        result["elapsed"] = time.time() - started
        module.exit_json(**result)

    staging = _model.staging_path(p["path"])
    base = staging if os.path.isdir(staging) else p["path"]
    partials = _model_hub.partial_sizes(base, manifest) if os.path.isdir(base) else {}
    present = _model.present_bytes(base, manifest, partials) if os.path.isdir(base) else 0
    try:
        result["needed_bytes"], result["free_bytes"] = _model.space_check(
            os.path.dirname(p["path"].rstrip("/")), manifest, present, p["free_bytes"])
    except _model.ModelError as error:
        result.update(needed_bytes=getattr(error, "needed", 0), free_bytes=getattr(error, "free", 0))
        module.fail_json(msg="%s: %s" % (p["path"], error), **result)
    if p["space_only"] or module.check_mode:
        result["elapsed"] = time.time() - started
        module.exit_json(**result)

    result["changed"] = True
    staging = prepare_staging(p["path"])
    good = trusted(staging, p["commit"], manifest)
    result["removed"] = _model.clean_orphans(staging, manifest)
    missing = missing_files(staging, manifest, p["source"])
    result["transferred"] = [item["path"] for item in missing]
    progress = None
    if p["progress_path"]:
        progress = _model_hub.Progress(staging, manifest, p["progress_path"], _model.write_json,
                                       _model.progress_line).start()
    try:
        if missing and p["source"] == "hub":
            resumed, cleaned = _model_hub.download(
                staging, p["repo_id"], p["commit"], missing, p["endpoint"], p["token"],
                p["xet"], p["workers"])
            result["resumed_from"] = resumed
            result["removed"].extend(cleaned)
            result["bytes_transferred"] = sum(item["size"] - resumed.get(item["path"], 0)
                                              for item in missing)
        elif missing:
            src = p["peer"] if p["source"] == "peer" else p["source_path"].rstrip("/") + "/"
            result["bytes_transferred"] = rsync(module, src, staging,
                                                [item["path"] for item in missing], p["timeout"])
        todo = [item for item in manifest if item["path"] not in good]
        new_good, bad, result["bytes_hashed"] = _model.verify_files(staging, todo, p["workers"])
        good.update(new_good)
        if bad:
            for rel in bad:
                if os.path.exists(os.path.join(staging, rel)):
                    os.unlink(os.path.join(staging, rel))
            _model.write_marker(staging, p["repo_id"], p["commit"], good)
            module.fail_json(
                msg="%d file(s) from %s did not match the manifest of %s at %s and were "
                    "removed (the next run fetches them again): %s"
                    % (len(bad), p["peer"] or p["source_path"] or p["endpoint"], p["repo_id"],
                       p["commit"], "; ".join("%s: %s" % kv for kv in sorted(bad.items()))),
                **result)
        _model.write_json(os.path.join(staging, _model.MANIFEST),
                          {"repo_id": p["repo_id"], "commit": p["commit"], "files": manifest})
        _model.write_marker(staging, p["repo_id"], p["commit"], good)
        shutil.rmtree(os.path.join(staging, ".cache"), ignore_errors=True)
        _model.place(staging, p["path"])
    except _model.ModelError as error:
        module.fail_json(msg=str(error), **result)
    except Exception as error:  # a download error of any kind: report it with the traceback
        module.fail_json(msg="fetching %s into %s failed: %s" % (p["repo_id"], staging, error),
                         exception=traceback.format_exc(), **result)
    finally:
        if progress:
            progress.finish({"transferred": len(result["transferred"])}, p["path"])
    result["elapsed"] = time.time() - started
    _model.write_json(_model.last_fetch_path(p["path"]),
                      dict(result, source=p["source"], peer=p["peer"], commit=p["commit"],
                           finished_at=time.time()))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
