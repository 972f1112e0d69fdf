# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Argument specs the model step's modules share, on the model of community.docker's
``DOCKER_COMMON_ARGS``; their docs are the fragments of ``doc_fragments/_model.py``."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

#: The model directory (doc fragment gpufleet.sglang._model).
MODEL_DIR_ARGS = dict(
    path=dict(type="path", required=True),
    commit=dict(type="str", required=True),
    workers=dict(type="int", default=4),
)

#: The Hub (doc fragment gpufleet.sglang._model.hub).
HUB_ARGS = dict(
    repo_id=dict(type="str", required=True),
    endpoint=dict(type="str", default="https://huggingface.co"),
    xet=dict(type="bool", default=False),
)

#: The transfer's progress file (doc fragment gpufleet.sglang._model.progress).
PROGRESS_ARGS = dict(
    progress_path=dict(type="path"),
)

#: What the transfer's wait looks at besides the job (doc fragment gpufleet.sglang._model.watch).
WATCH_ARGS = dict(
    session=dict(type="str"),
    inbox=dict(type="path"),
    published_path=dict(type="path"),
    published_after=dict(type="int", default=0),
    published_total=dict(type="int", default=0),
    published_batch=dict(type="float", default=1.0),
)


def args(*specs, **own):
    """One argument spec: the shared ``specs`` and the module's ``own`` options."""
    out = {}
    for spec in specs:
        out.update((k, dict(v)) for k, v in spec.items())
    out.update(own)
    return out
