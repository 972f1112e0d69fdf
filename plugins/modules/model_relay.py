#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: model_relay
short_description: Hand a swarm seed's piece hashes to the site's peers while the hosts run
version_added: 0.3.0
author: gpufleet developers (@gpufleet)
description:
  - One task for every host of a swarm site, in place of a wave of tasks per batch of files.
    Its instances run at the same time (the plan uses it only when C(forks) covers every
    host of the play).
  - For the site's feeder (O(role=feeder)), watches the published journal on the host as
    M(gpufleet.sglang.model_wait) does, and appends each batch of records (the piece hashes
    of the files the seed verified) to the site's relay file on the controller, until every
    record is out. A transfer that fails or ends first is written there too.
  - For a peer (O(role=peer)), hands the records of the relay file's new lines to the host's
    inbox (M(gpufleet.sglang.model_swarm)) as they come, until every record is handed out;
    the feeder's failure fails it with the feeder's message.
  - For a holder, or a seed that is not the feeder, reads the relay file the same way and
    hands nothing, until every record is out.
  - With O(lease), the inbox of a peer or holder that was handed nothing for a quarter of it
    is touched, and the feeder's is touched by each look at its journal, as word from the
    controller that keeps the swarm's lease (the C(lease) key of
    M(gpufleet.sglang.model_fetch)'s C(swarm)). A swarm whose controller is gone ends on its
    own.
  - The relay directory is the controller's, 0700; a directory that is not the controller
    user's own, or that other users can open, is refused.
  - Runs on the controller (an action plugin); nothing is installed on the hosts.
extends_documentation_fragment:
  - gpufleet.sglang._model.progress
  - gpufleet.sglang._attributes
attributes:
  check_mode:
    support: full
    details: The peers' inboxes are left as they are (M(gpufleet.sglang.model_swarm) in check mode).
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Each batch appends a line to the relay file and to each peer's inbox.
options:
  role:
    description: This host's part (required unless O(remove)); a holder or seed that is not
      the feeder hands nothing.
    type: str
    choices: [feeder, peer, holder, seed]
  feeder:
    description: The site's feeder host (its relay file is named after it).
    type: str
  relay_dir:
    description: The step's relay directory on the controller (the plan's C(relay_dir)).
    type: path
    required: true
  remove:
    description: Remove O(relay_dir) (once the swarm is over) and do nothing else.
    type: bool
    default: false
  session:
    description: The step's swarm session id.
    type: str
  published_total:
    description: Records the feeder publishes in all (files that are not empty).
    type: int
  jid:
    description: With O(role=feeder), the async job id of the feeder's transfer.
    type: str
  published_path:
    description: With O(role=feeder), the published journal on the feeder.
    type: path
  published_batch:
    description: Seconds the feeder's new records are gathered before they are appended.
    type: float
    default: 0.2
  inbox:
    description: The inbox journal of the host's swarm.
    type: path
  lease:
    description: The swarm's lease in seconds (0 for none).
    type: float
    default: 0
  interval:
    description: Seconds between the feeder's progress lines.
    type: float
    default: 10
  timeout:
    description: Seconds to relay in total.
    type: float
    default: 86400
seealso:
  - module: gpufleet.sglang.model_wait
  - module: gpufleet.sglang.model_swarm
"""

EXAMPLES = r"""
- name: Hand out the piece hashes as the site's feeder publishes them
  gpufleet.sglang.model_relay:
    role: "{{ 'feeder' if inventory_hostname == swarm.feeder else swarm.role }}"
    feeder: "{{ swarm.feeder }}"
    relay_dir: "{{ plan.relay_dir }}"
    session: "{{ plan.session }}"
    published_total: "{{ plan.published_total }}"
    jid: "{{ model_job.ansible_job_id }}"
    published_path: /models/.org--name.swarm-published.jsonl
    inbox: /models/.org--name.swarm-inbox.jsonl
"""

RETURN = r"""
published:
  description: With O(role=feeder), the records appended to the relay file.
  type: int
  returned: for the feeder
handed:
  description: With O(role=peer), the records handed to the host's inbox.
  type: int
  returned: for a peer
batches:
  description: Lines appended (feeder) or inbox appends made (peer).
  type: int
  returned: for the feeder and the peers
touches:
  description: Times the host's inbox was touched because nothing was handed to it (O(lease)).
  type: int
  returned: for the peers and the holders
"""
