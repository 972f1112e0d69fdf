#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: model_watch
short_description: Watch a background model transfer on the host for one progress interval
version_added: 0.3.0
author: gpufleet developers (@gpufleet)
description:
  - The host's half of M(gpufleet.sglang.model_wait), which runs it; not meant to be used
    on its own.
  - Looks every 0.1 s, on the host, at the async job of a M(gpufleet.sglang.model_fetch)
    task (async_wrapper's results file, read the way async_status reads it), its progress
    file and, with O(until=published), its published journal, for at most O(window)
    seconds, and returns as soon as the job ended or what O(until) waits for is there.
  - One run of this module replaces the module runs per poll (async_status and slurp) that
    the wait used to make on every host, a few times a second.
extends_documentation_fragment:
  - gpufleet.sglang._model.progress
  - gpufleet.sglang._model.watch
  - gpufleet.sglang._attributes
  - gpufleet.sglang._attributes.info_module
options:
  job_path:
    description: The async job's results file (C(<async_dir>/<jid>)).
    type: path
    required: true
  window:
    description: Seconds to watch at most (the controller's progress interval).
    type: float
    required: true
  until:
    description: What the controller waits for (see M(gpufleet.sglang.model_wait)).
    type: str
    choices: [finished, published, complete]
    default: finished
seealso:
  - module: gpufleet.sglang.model_wait
"""

EXAMPLES = r"""
- name: Watch the transfer for up to 10 s (what model_wait does in a loop)
  gpufleet.sglang.model_watch:
    job_path: /root/.ansible_async/j123.456
    window: 10
    until: complete
    progress_path: /models/.org--name.progress.json
    session: "{{ plan.session }}"
"""

RETURN = r"""
answered:
  description: Whether the job ended or what O(until) waits for is there.
  type: bool
  returned: always
ended:
  description: Whether the async job ended (the controller then asks async_status for its result).
  type: bool
  returned: always
complete:
  description: With O(until=complete), whether the progress says this session's copy is complete.
  type: bool
  returned: when until is complete and the job runs
progress:
  description: The progress file's document at the last look (null when there is none).
  type: dict
  returned: always
published:
  description: With O(until=published), the records published after O(published_after).
  type: list
  elements: dict
  returned: when until is published and records are there
count:
  description: With O(until=published), the records published so far.
  type: int
  returned: when until is published and records are there
all_published:
  description: With O(until=published), whether every record is out.
  type: bool
  returned: when until is published and records are there
looks:
  description: The looks this run made.
  type: int
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import (
    _model_args,
    _model_watch)


def main():
    module = AnsibleModule(
        argument_spec=_model_args.args(
            _model_args.PROGRESS_ARGS, _model_args.WATCH_ARGS,
            job_path=dict(type="path", required=True),
            window=dict(type="float", required=True),
            until=dict(type="str", choices=list(_model_watch.UNTIL), default="finished"),
        ),
        required_if=[("until", "published", ("published_path", "session")),
                     ("until", "complete", ("progress_path", "session"))],
        supports_check_mode=True,
    )
    seen = _model_watch.watch(module.params, module.params["window"])
    module.exit_json(changed=False, **seen)


if __name__ == "__main__":
    main()
