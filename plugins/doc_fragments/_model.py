# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This doc fragment is PRIVATE to the gpufleet.sglang collection.

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """Options the model step's modules share (their specs: module_utils/weights/_model_args.py)."""

    # The model directory a module works on (model_check, model_fetch).
    DOCUMENTATION = r"""
options:
  path:
    description: The model directory on the host.
    type: path
    required: true
  commit:
    description: The 40-hex commit the directory holds when it is verified.
    type: str
    required: true
  workers:
    description: Files hashed (and, for M(gpufleet.sglang.model_fetch), byte ranges downloaded, one file after another) at the same time.
    type: int
    default: 4
"""

    # The Hub a module asks (model_resolve, model_fetch); the token stays each module's own.
    HUB = r"""
options:
  repo_id:
    description: The repo, C(<org>/<name>).
    type: str
    required: true
  endpoint:
    description: The Hub or a site mirror (C(HF_ENDPOINT)).
    type: str
    default: https://huggingface.co
  xet:
    description:
      - Let huggingface_hub use Xet storage on the hosts; false sets C(HF_HUB_DISABLE_XET=1).
      - M(gpufleet.sglang.model_resolve) refuses an endpoint that advertises Xet without
        serving it when this is true.
    type: bool
    default: false
"""

    # The transfer's progress file: model_fetch writes it, model_wait reads it.
    PROGRESS = r"""
options:
  progress_path:
    description:
      - The transfer's progress file (JSON, one line of files, bytes, rate and ETA).
      - M(gpufleet.sglang.model_fetch) writes it; M(gpufleet.sglang.model_wait) reads it
        (through M(gpufleet.sglang.model_watch) on the host).
    type: path
"""

    # What the transfer's wait looks at besides the job (model_wait, and model_watch, which
    # does the looking on the host for it).
    WATCH = r"""
options:
  session:
    description: The step's swarm session id.
    type: str
  inbox:
    description:
      - The host's swarm inbox. Each run of M(gpufleet.sglang.model_watch) touches it, as word
        from the controller, which keeps the swarm's lease (the C(lease) key of
        M(gpufleet.sglang.model_fetch)'s C(swarm)).
    type: path
  published_path:
    description: The published journal of a swarm seed or holder (O(until=published)).
    type: path
  published_after:
    description: Records of O(session) already handed out.
    type: int
    default: 0
  published_total:
    description: Records the feeder publishes in all (files that are not empty).
    type: int
    default: 0
  published_batch:
    description:
      - Seconds new records are gathered before they are returned (unless all are out), so
        that a burst of small files makes one wave.
    type: float
    default: 1.0
"""
