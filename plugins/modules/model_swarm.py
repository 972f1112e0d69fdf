#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: model_swarm
short_description: Hand a host's swarm the piece hashes of verified files, or tell it to stop
version_added: 0.3.0
author: gpufleet developers (@gpufleet)
description:
  - Appends one line to the inbox journal that a running M(gpufleet.sglang.model_fetch)
    with C(swarm) reads, tagged with the step's O(session).
  - O(add) carries the records (path, size, digest, piece length, piece hashes, info-hash)
    the site's seed published after it verified each file; the host checks each against
    the manifest and its info-hash and lets the engine fetch and check the pieces.
  - O(stop) ends the host's swarm (it closes its session and port, writes its marker and,
    when it holds every file, moves the directory into place).
  - O(keepalive) with nothing to add or stop touches the inbox (creates it, sets its mtime),
    as word from the controller that keeps the swarm's lease (the C(lease) key of
    M(gpufleet.sglang.model_fetch)'s C(swarm)).
  - Its action plugin appends the lines with one shell command fed through the
    connection's pipelining (no Python start on the host; the relay's peers hand out their
    batches the same way); this module runs where the connection does not pipeline, in
    check mode, and for an O(inbox) that is not an absolute path.
extends_documentation_fragment:
  - gpufleet.sglang._attributes
attributes:
  check_mode:
    support: full
    details: Reports what it would append and appends nothing.
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Each call appends a line (a record already known is ignored by the swarm).
options:
  inbox:
    description: The inbox journal of the host's swarm.
    type: path
    required: true
  session:
    description: The step's swarm session id (lines of another session are ignored).
    type: str
    required: true
  add:
    description: Records to add.
    type: list
    elements: dict
    default: []
  stop:
    description: End the host's swarm.
    type: bool
    default: false
  keepalive:
    description: With nothing to add or stop, touch the inbox instead (reported unchanged).
    type: bool
    default: false
seealso:
  - module: gpufleet.sglang.model_fetch
"""

EXAMPLES = r"""
- name: Stop the swarm on every host
  gpufleet.sglang.model_swarm:
    inbox: /models/.org--name.swarm-inbox.jsonl
    session: "{{ plan.session }}"
    stop: true
"""

RETURN = r"""
added:
  description: Records appended.
  type: int
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files


def main():
    module = AnsibleModule(
        argument_spec=dict(
            inbox=dict(type="path", required=True),
            session=dict(type="str", required=True),
            add=dict(type="list", elements="dict", default=[]),
            stop=dict(type="bool", default=False),
            keepalive=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["keepalive"] and not (p["add"] or p["stop"]):
        if not module.check_mode:
            os.makedirs(os.path.dirname(p["inbox"]) or "/", exist_ok=True)
            _files.touch(p["inbox"])
        module.exit_json(changed=False, added=0)
    line = {"session": p["session"], "add": p["add"], "stop": p["stop"]}
    if not module.check_mode and (p["add"] or p["stop"]):
        os.makedirs(os.path.dirname(p["inbox"]) or "/", exist_ok=True)
        _files.append_line(p["inbox"], line)
    module.exit_json(changed=bool(p["add"] or p["stop"]), added=len(p["add"]))


if __name__ == "__main__":
    main()
