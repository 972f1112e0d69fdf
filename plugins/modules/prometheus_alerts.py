#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: prometheus_alerts
short_description: The alerts a Prometheus fires now for the SGLang fleet
version_added: 0.4.0
author: gpufleet developers (@gpufleet)
description:
  - Reads C(GET /api/v1/alerts) of the Prometheus at O(url) and returns its firing alerts,
    one row each (alert name, host, severity, since when, summary), sorted by host.
  - With O(hosts), keeps the alerts whose C(host) label is one of them, and those that name
    no host.
  - Used by C(playbooks/status.yml) next to its table when C(status_prometheus_url) is set;
    the table does not depend on it.
extends_documentation_fragment:
  - gpufleet.sglang._attributes
  - gpufleet.sglang._attributes.info_module
options:
  url:
    description: Base URL of the Prometheus, e.g. V(http://prometheus.example:9090).
    type: str
    required: true
  hosts:
    description: Keep only alerts about these hosts (and those naming none); empty keeps all.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds the request may take.
    type: float
    default: 10
seealso:
  - ref: gpufleet.sglang.monitoring <ansible_collections.gpufleet.sglang.monitoring_role>
    description: The role gpufleet.sglang.monitoring that writes the rules these alerts come from.
"""

EXAMPLES = r"""
- name: Read the firing alerts
  gpufleet.sglang.prometheus_alerts:
    url: http://prometheus.example:9090
    hosts: "{{ ansible_play_hosts_all }}"
  register: alerts
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
alerts:
  description: The firing alerts.
  returned: success
  type: list
  elements: dict
  contains:
    alertname:
      description: The alert's name.
      type: str
    host:
      description: Its C(host) label (empty when it names none).
      type: str
    severity:
      description: Its C(severity) label.
      type: str
    since:
      description: When it became active (RFC 3339).
      type: str
    summary:
      description: Its summary annotation.
      type: str
    line:
      description: One printable line.
      type: str
count:
  description: How many alerts fire.
  returned: success
  type: int
"""

import json
import urllib.error

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

from ansible_collections.gpufleet.sglang.plugins.module_utils.monitoring._monitoring import (
    MonitoringError,
    firing_alerts,
)


def fetch(url, timeout):
    """``GET url`` as JSON; raises OSError/ValueError when nothing (readable) answers."""
    resp = open_url(url, method="GET", timeout=timeout, follow_redirects="none")
    return json.loads(resp.read().decode("utf-8", "replace"))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            hosts=dict(type="list", elements="str", default=[]),
            timeout=dict(type="float", default=10),
        ),
        supports_check_mode=True,
    )
    p = module.params
    base = p["url"].rstrip("/")
    try:
        doc = fetch(base + "/api/v1/alerts", p["timeout"])
        rows = firing_alerts(doc, p["hosts"], base)
    except urllib.error.HTTPError as exc:
        module.fail_json(msg="status_prometheus_url=%s: GET /api/v1/alerts answered %s"
                         % (base, exc.code))
    except (OSError, ValueError) as exc:
        module.fail_json(msg="status_prometheus_url=%s: cannot read /api/v1/alerts: %s"
                         % (base, exc))
    except MonitoringError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, alerts=rows, count=len(rows))


if __name__ == "__main__":
    main()
