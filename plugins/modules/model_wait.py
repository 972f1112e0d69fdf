#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: model_wait
short_description: Wait for a background model transfer, showing its progress
version_added: 0.2.0
author: gpufleet developers (@gpufleet)
description:
  - Polls the async job of a M(gpufleet.sglang.model_fetch) task started with C(poll=0)
    and, every O(interval) seconds, prints the files and bytes done, the rate and the ETA
    that the transfer writes to O(progress_path).
  - Returns the transfer's own result when it ends (failed when it failed).
extends_documentation_fragment:
  - gpufleet.sglang._model.progress
  - gpufleet.sglang._attributes
  - gpufleet.sglang._attributes.info_module
options:
  jid:
    description: The async job id (C(ansible_job_id) of the started task).
    type: str
    required: true
  interval:
    description: Seconds between progress lines (at most 30 for a long transfer).
    type: float
    default: 10
  timeout:
    description: Seconds to wait in total.
    type: float
    default: 86400
seealso:
  - module: gpufleet.sglang.model_fetch
"""

EXAMPLES = r"""
- name: Wait for the download, with progress
  gpufleet.sglang.model_wait:
    jid: "{{ model_job.ansible_job_id }}"
    progress_path: /models/.progress.json
    interval: 10
"""

RETURN = r"""
progress:
  description: The progress lines shown.
  type: list
  elements: str
  returned: always
"""
