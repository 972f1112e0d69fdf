#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: router_hold
short_description: Write, remove or read the marker that holds an SGLang server out of every router
version_added: 0.4.0
author: gpufleet developers (@gpufleet)
description:
  - The hold marker (C(/var/lib/gpufleet-sglang/router-hold.json), JSON C({"reason", "since", "by"}))
    on a server's serving host says that the server is held out of every router of the group on
    purpose (a tune trial, an operator). Router membership keeps a held server out, and a rollout
    does not put a held server back after its restart.
  - O(state=present) writes the marker (an existing marker is kept as it is, so its C(since) stays the
    time the hold began); O(state=absent) removes it; O(state=query) only reads it.
  - The result's RV(held) is true when the marker is there or O(inventory_hold) is true (the
    inventory's C(sglang_router_hold)).
extends_documentation_fragment:
  - gpufleet.sglang._attributes
attributes:
  check_mode:
    support: full
    details:
      - Tells whether the marker would be written or removed; writes and removes nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - An existing marker is kept; removing a missing marker changes nothing.
options:
  state:
    description: What to do with the marker.
    type: str
    choices: [present, absent, query]
    default: query
  reason:
    description: With O(state=present), one word that says why (e.g. V(tune), V(operator)).
    type: str
    default: operator
  by:
    description: With O(state=present), what holds it (a playbook's name).
    type: str
    default: ''
  inventory_hold:
    description: The inventory's C(sglang_router_hold) for this host; true makes RV(held) true.
    type: bool
    default: false
  path:
    description: The marker's path (the collection's; a test may point elsewhere).
    type: path
    default: /var/lib/gpufleet-sglang/router-hold.json
"""

EXAMPLES = r"""
- name: Hold this server out of every router
  gpufleet.sglang.router_hold:
    state: present
    reason: tune
    by: playbooks/tune.yml

- name: Is this server held?
  gpufleet.sglang.router_hold:
    inventory_hold: "{{ sglang_router_hold | default(false) }}"
  register: hold
"""

RETURN = r"""
held:
  description: Whether the server is held (the marker after the call, or O(inventory_hold)).
  type: bool
  returned: always
marker:
  description: The marker's content after the call (null when there is none).
  type: dict
  returned: always
  sample: {"reason": "tune", "since": "2026-01-01T00:00:00Z", "by": "playbooks/tune.yml"}
"""

import datetime
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files
from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _paths
from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router_fleet


def read_marker(path):
    """The marker's document; a file that is there but not a JSON object still holds."""
    if not os.path.lexists(path):
        return None
    doc = _files.read_json(path)
    return doc if isinstance(doc, dict) else {"reason": "unreadable", "since": "", "by": ""}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "absent", "query"], default="query"),
            reason=dict(type="str", default="operator"),
            by=dict(type="str", default=""),
            inventory_hold=dict(type="bool", default=False),
            path=dict(type="path", default=_paths.ROUTER_HOLD_PATH),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    marker = read_marker(path)
    changed = False
    try:
        if p["state"] == "present" and marker is None:
            marker = _router_fleet.hold_marker(
                p["reason"], p["by"],
                datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
            changed = True
            if not module.check_mode:
                directory = os.path.dirname(path)
                if not os.path.isdir(directory):
                    os.makedirs(directory, 0o755)
                _files.write_json(path, marker, mode=0o644)
        elif p["state"] == "absent" and marker is not None:
            changed = True
            marker = None
            if not module.check_mode:
                os.unlink(path)
    except _router_fleet.FleetError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg="cannot %s the hold marker %s: %s"
                             % ("write" if p["state"] == "present" else "remove", path, exc))
    module.exit_json(changed=changed, marker=marker,
                     held=_router_fleet.is_held(marker, p["inventory_hold"]))


if __name__ == "__main__":
    main()
