#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: model_plan
short_description: Plan the model's fan-out from the play's hosts (swarm, rounds, fallback)
version_added: 0.3.0
author: gpufleet developers (@gpufleet)
description:
  - Runs on the controller only (an action plugin), once for the play.
  - Reads each play host's C(__model_site), C(__model_address), C(__model_is_seed),
    C(__model_check) and C(__model_engine) facts and plans, per site, the host that
    downloads from the Hub, the swarm (every host with the engine; verified hosts serve)
    and the doubling rounds for the hosts without the engine.
extends_documentation_fragment:
  - gpufleet.sglang._attributes
  - gpufleet.sglang._attributes.info_module
options:
  engine:
    description: C(libtorrent) swarms where it is installed; C(rsync) plans rounds only.
    type: str
    choices: [libtorrent, rsync]
    default: libtorrent
  manifest:
    description: The files of the commit (the count of records a feeder publishes).
    type: list
    elements: dict
    default: []
  lease:
    description:
      - The swarm's lease in seconds (C(model_swarm_lease)), checked and returned in the plan
        as C(lease); 0 for none, else at least 3 times O(interval).
    type: float
    default: 0
  interval:
    description: The progress interval in seconds (C(model_progress_interval)).
    type: float
    default: 10
seealso:
  - module: gpufleet.sglang.model_fetch
"""

EXAMPLES = r"""
- name: Plan the fan-out
  gpufleet.sglang.model_plan:
    engine: libtorrent
    manifest: "{{ source.manifest }}"
  run_once: true
  register: fanout
"""

RETURN = r"""
plan:
  description:
    - C(hub), C(swarm), C(rounds), C(sites), C(fallback), C(session), C(published_total),
      C(relay_dir), C(lease).
    - C(relay) is true when M(gpufleet.sglang.model_relay) hands out the seed's records
      (C(forks) covers every host of the plan); otherwise the role's waves do.
  type: dict
  returned: always
"""
