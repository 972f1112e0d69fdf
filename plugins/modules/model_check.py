#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: model_check
short_description: Tell whether a model directory is verified for a commit
version_added: 0.2.0
author: gpufleet developers (@gpufleet)
description:
  - The quick check (O(deep=false)) reads the directory's verified marker and manifest and
    compares each file's size and mtime with those recorded when the file was hashed. It
    reads no file content and makes no network request.
  - The deep check (O(deep=true)) hashes every file of the manifest once (sha256 for LFS
    files, the git blob sha1 for the others), in parallel. A file that differs is
    removed and the marker is rewritten without it, so the directory no longer counts as
    verified and the next fetch repairs only that file (from the seed or a peer).
extends_documentation_fragment:
  - gpufleet.sglang._model
  - gpufleet.sglang._attributes
attributes:
  check_mode:
    support: full
    details: In check mode the deep check hashes but removes nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  deep:
    description: Hash every file instead of comparing size and mtime.
    type: bool
    default: false
seealso:
  - module: gpufleet.sglang.model_fetch
  - module: gpufleet.sglang.model_resolve
"""

EXAMPLES = r"""
- name: Is the model in place?
  gpufleet.sglang.model_check:
    path: /models/org--name/main
    commit: 0123456789abcdef0123456789abcdef01234567
  register: model_state
"""

RETURN = r"""
verified:
  description: Whether the directory is verified for O(commit) (after a deep check, whether every hash matched).
  type: bool
  returned: always
problems:
  description: What is wrong, one line per file or marker problem.
  type: list
  elements: str
  returned: always
bytes_hashed:
  description: Bytes read and hashed (0 for the quick check).
  type: int
  returned: always
removed:
  description: Files removed by the deep check because their hash differed.
  type: list
  elements: str
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _weights
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _model, _model_args


def deep_check(module, path, commit, workers):
    quick = _weights.quick_check(path, commit)
    manifest = _model.read_json(os.path.join(path, _weights.MANIFEST))
    marker = _weights.read_marker(path)
    if manifest is None or marker is None or marker.get("commit") != commit:
        return quick, 0, []
    good, bad, hashed = _weights.verify_files(path, manifest["files"], workers)
    removed = []
    if bad and not module.check_mode:
        for rel in bad:
            full = os.path.join(path, rel)
            if os.path.exists(full):
                os.unlink(full)
                removed.append(rel)
        notes = dict((rel, (marker.get("files", {}).get(rel) or {}).get("against"))
                     for rel in good)
        _weights.write_marker(path, marker.get("repo_id"), commit, good,
                              dict((k, v) for k, v in notes.items() if v))
    problems = ["%s: %s" % (rel, why) for rel, why in sorted(bad.items())]
    return {"verified": not bad, "problems": problems}, hashed, removed


def main():
    module = AnsibleModule(
        argument_spec=_model_args.args(
            _model_args.MODEL_DIR_ARGS,
            deep=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if not _model.is_commit(params["commit"]):
        module.fail_json(msg="commit is %r: expected a 40-hex commit" % params["commit"])
    if params["deep"]:
        state, hashed, removed = deep_check(module, params["path"], params["commit"],
                                            params["workers"])
    else:
        state, hashed, removed = _weights.quick_check(params["path"], params["commit"]), 0, []
    module.exit_json(changed=bool(removed), verified=state["verified"],
                     problems=state["problems"], bytes_hashed=hashed, removed=removed)


if __name__ == "__main__":
    main()
