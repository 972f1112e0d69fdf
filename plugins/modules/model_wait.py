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
  - Waits for the async job of a M(gpufleet.sglang.model_fetch) task started with
    C(poll=0) and, every O(interval) seconds, prints the files and bytes done, the rate and
    the ETA that the transfer writes to O(progress_path).
  - The job, the progress and the published journal are looked at on the host every 0.1 s
    by M(gpufleet.sglang.model_watch), one run per O(interval); async_status is asked
    once, for the job's result, when the job ended.
  - Returns the transfer's own result when it ends (failed when it failed).
extends_documentation_fragment:
  - gpufleet.sglang._model.progress
  - gpufleet.sglang._model.watch
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
  until:
    description:
      - C(finished) waits for the job's end and returns its result; C(published) returns
        as soon as the swarm's O(published_path) holds more than O(published_after) records
        of O(session) (or the job ended); C(complete) returns once the progress says the
        host holds every file (or the job ended).
    type: str
    choices: [finished, published, complete]
    default: finished
  lease:
    description:
      - The swarm's lease in seconds (the C(lease) key of M(gpufleet.sglang.model_fetch)'s
        C(swarm)); 0 for none.
      - With O(until=published), the wait also returns when a quarter of it passed with no
        new record (the returned C(published) is then empty), so that the play can touch every host's
        inbox in between (the waves of the model role).
    type: float
    default: 0
seealso:
  - module: gpufleet.sglang.model_fetch
  - module: gpufleet.sglang.model_watch
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
published:
  description:
    - With O(until=published), the records published after O(published_after); empty when
      a quarter of O(lease) passed without one.
  type: list
  elements: dict
  returned: when until is published
count:
  description: With O(until=published), the records published so far.
  type: int
  returned: when until is published
session:
  description: With O(until=published), the session the records belong to.
  type: str
  returned: when until is published
all_published:
  description: With O(until=published), whether every record is out.
  type: bool
  returned: when until is published
"""
