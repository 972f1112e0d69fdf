#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: model_resolve
short_description: Resolve a model revision once for the fleet, list its files and plan the fan-out
version_added: 0.2.0
author: gpufleet developers (@gpufleet)
description:
  - Runs on the controller only, with the real huggingface_hub client.
  - Resolves a branch or tag to its 40-hex commit (one request); a 40-hex O(revision) is
    taken as it is and costs no request unless O(tree) is true.
  - With O(tree=true), lists the files at the commit (the tree, paginated) as the manifest
    (path, size, sha256 for LFS files or the git blob sha1), keeps those matching
    O(allow_patterns), and refuses a manifest without C(config.json).
  - Refuses early an unknown repo or revision, a 401 or 403 (naming C(model_hf_token),
    never printing it) and an endpoint that advertises Xet without serving it when
    O(xet=true) (set C(model_xet=false), that is C(HF_HUB_DISABLE_XET=1)).
  - With O(tree=true), plans the fan-out. Per site, the host that downloads from the Hub
    (none when a host of the site is verified already) and the rounds in which every
    verified host serves one more host.
extends_documentation_fragment:
  - gpufleet.sglang._model.hub
  - gpufleet.sglang._attributes
  - gpufleet.sglang._attributes.info_module
options:
  revision:
    description: Branch, tag or 40-hex commit.
    type: str
    default: main
  token:
    description: Hub token (never shown).
    type: str
  allow_patterns:
    description: Only files matching one of these patterns (as huggingface_hub's C(allow_patterns)).
    type: list
    elements: str
  tree:
    description: List the files and plan the fan-out.
    type: bool
    default: false
  manifest:
    description:
      - The files of a local source (its C(.gpufleet-manifest.json)); no Hub request is
        made and O(revision) is the commit that manifest names.
    type: list
    elements: dict
  capacity:
    description:
      - With O(tree=true), plan the GPU memory before any weight moves, from the commit's
        C(config.json) fetched alone, with the server preflight's planner and verdict.
      - Keys C(strategy), C(gpu_count), C(gpu_memory_mib) (all three needed, else no plan),
        and C(nnodes), C(mem_fraction_static), C(context_length), C(kv_dtype),
        C(extra_args), C(allow_unfit).
      - A strategy that cannot run or does not fit is refused.
    type: dict
  hosts:
    description: Host -> site, for the plan.
    type: dict
  verified:
    description: Hosts that hold a verified copy already.
    type: list
    elements: str
  seeds:
    description: Site -> the host that downloads for it (default, the site's first host).
    type: dict
seealso:
  - module: gpufleet.sglang.model_fetch
  - module: gpufleet.sglang.model_check
"""

EXAMPLES = r"""
- name: Resolve the revision once
  gpufleet.sglang.model_resolve:
    repo_id: moonshotai/Kimi-K2.5
    revision: main
  run_once: true
  register: model_resolved
"""

RETURN = r"""
commit:
  description: The 40-hex commit.
  type: str
  returned: success
manifest:
  description: The files (path, size, algo, digest), with O(tree=true).
  type: list
  elements: dict
  returned: success
total_bytes:
  description: Bytes of the manifest.
  type: int
  returned: with O(tree=true)
plan:
  description: C(hub) (hosts that download), C(rounds) (target -> source per round), C(sites).
  type: dict
  returned: with O(tree=true)
xet_advertised:
  description: Whether the tree advertises Xet storage.
  type: bool
  returned: when the Hub was asked
capacity_plan:
  description: The memory plan made before the transfer (with O(capacity)).
  type: dict
  returned: with O(capacity)
hub_requests_made:
  description: Whether the Hub was asked at all.
  type: bool
  returned: success
"""
