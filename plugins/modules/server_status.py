#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: server_status
short_description: Report what an SGLang host runs right now, and whether it drifted
version_added: 0.2.0
author: gpufleet developers (@gpufleet)
description:
  - Reads, and never changes, what one host serves; returns one row of the fleet table
    that C(playbooks/status.yml) prints.
  - "From the deployment record that M(gpufleet.sglang.server_unit) wrote (O(record_path)):
    the strategy, the release and the last deploy time (C(deployed_at))."
  - "From C(systemctl show): the unit's state, main PID and how long that process has run."
  - Over HTTP on the host, the release's readiness route (V(/ready) from 0.5.23,
    V(/health) on 0.5.x before that, V(/health_generate) on 0.4.x) and SGLang's
    Prometheus V(/metrics) (C(sglang:num_running_reqs), C(sglang:num_queue_reqs),
    C(sglang:gen_throughput)). SGLang serves V(/metrics) only when started with
    C(--enable-metrics); without it the metric columns are empty, which is not a problem.
  - "The prefill/decode (PD) role: from the main process's command line (C(/proc/<MainPID>/cmdline):
    C(--disaggregation-mode prefill|decode), C(--disaggregation-bootstrap-port), SGLang's 8998 when a
    prefill server names none), else from the record's C(argv); none of them is a co-located server.
    The peers of a PD server are the fleet's (filter P(gpufleet.sglang.status_fleet#filter))."
  - Drift is when the sha1 of the unit file and of the environment file on disk against the
    record's C(unit_sha1) and C(env_sha1) differ from it, the process that holds the
    port is not the service's own, or the process runs another PD role than the record says.
  - Never fails for an unhealthy or drifted server; it reports it in RV(row.problems).
    It fails only on bad arguments.
extends_documentation_fragment:
  - gpufleet.sglang._attributes
  - gpufleet.sglang._attributes.info_module
options:
  name:
    description: The host's name in the row (the playbook passes C(inventory_hostname)).
    type: str
  service:
    description: Name of the systemd service (without C(.service)).
    type: str
    default: sglang
  port:
    description: HTTP port of the server on the host. Defaults to the record's C(port), else 30000.
    type: int
  address:
    description: Address on the host to reach the server at.
    type: str
    default: 127.0.0.1
  release:
    description:
      - The SGLang release that runs, to pick the readiness route. Defaults to the
        record's C(release).
    type: str
  record_path:
    description: The deployment record (a local fact file).
    type: path
    default: /etc/ansible/facts.d/sglang.fact
  unit_dir:
    description: Directory of the installed unit C(<service>.service).
    type: path
    default: /etc/systemd/system
  config_dir:
    description: Directory of the installed environment file C(<service>.env).
    type: path
    default: /etc/sglang
  request_timeout:
    description: Seconds one HTTP request may take.
    type: float
    default: 5.0
  metrics:
    description: Whether to read V(/metrics).
    type: bool
    default: true
notes:
  - The environment file is mode 0600; run as root (or with become) to read it.
  - A record written before C(env_sha1) was recorded cannot tell drift of the
    environment file; the next deploy records it.
seealso:
  - module: gpufleet.sglang.server_unit
    description: Writes the unit, the environment file and the deployment record.
  - module: gpufleet.sglang.server_health
    description: Waits until a server is ready.
"""

EXAMPLES = r"""
- name: Read what the host serves
  gpufleet.sglang.server_status:
    name: "{{ inventory_hostname }}"
    port: 30000
  register: status

- name: Show the row
  ansible.builtin.debug:
    msg: "{{ [status.header, status.row.line] + status.row.problems }}"
"""

RETURN = r"""
header:
  description: The header line of the fixed-width fleet table.
  returned: always
  type: str
row:
  description: The host's row of the fleet table.
  returned: always
  type: dict
  contains:
    host:
      description: O(name), else the host's hostname.
      type: str
    deployed:
      description: Whether a deployment record exists.
      type: bool
    strategy:
      description: The record's strategy.
      type: str
    release:
      description: The record's release.
      type: str
    deployed_at:
      description: The record's last deploy time (UTC).
      type: str
    active_state:
      description: The unit's C(ActiveState).
      type: str
    main_pid:
      description: The unit's main PID (null when none).
      type: int
    uptime_s:
      description: Seconds the main process has run (null when the unit is not active).
      type: int
    uptime:
      description: RV(row.uptime_s) as text (C(1d2h3m)).
      type: str
    ready_route:
      description: The release's readiness route.
      type: str
    ready:
      description: Whether the readiness route answered 200.
      type: bool
    ready_detail:
      description: What the readiness route answered (C(200), C(503), C(connection refused), ...).
      type: str
    metrics:
      description: C(ok), or why V(/metrics) gave nothing (C(off) when the server runs without C(--enable-metrics)).
      type: str
    running:
      description: C(sglang:num_running_reqs) (null without metrics).
      type: int
    queued:
      description: C(sglang:num_queue_reqs) (null without metrics).
      type: int
    gen_throughput:
      description: C(sglang:gen_throughput), tokens/s (null without metrics).
      type: float
    drift:
      description: How the files or the port differ from the deployment record.
      type: list
      elements: str
    pd_role:
      description: C(prefill) or C(decode); null for a co-located server.
      type: str
    pd_source:
      description: Where RV(row.pd_role) was read, C(process) (what runs) or C(record); null with neither.
      type: str
    pd_bootstrap_port:
      description: A prefill server's bootstrap port (null otherwise).
      type: int
    pd_transfer_backend:
      description: The C(--disaggregation-transfer-backend) a PD server names (null when it names none).
      type: str
    pd_node_rank:
      description: The server's C(--node-rank) (0 on a single-host server).
      type: int
    pd_peers:
      description: Null here; the fleet's filter fills it (the servers of the other role).
      type: list
      elements: dict
    pending:
      description:
        - The unit's directives (C(Section.Key)) installed but not yet applied to the running
          process, for example sandboxing options an upgrade of the collection installed; they
          apply at the next restart (or a deploy with C(sglang_apply_pending=true)). Read from
          the record's C(pending), while the main PID it names still runs. Not a problem.
      type: list
      elements: str
    drifted:
      description: Whether RV(row.drift) is not empty.
      type: bool
    healthy:
      description: Deployed, active and ready.
      type: bool
    ok:
      description: Healthy and not drifted.
      type: bool
    problems:
      description: Every reason the host is unhealthy or drifted.
      type: list
      elements: str
    verdict:
      description: "C(<host>: <problems>) or C(<host>: ok)."
      type: str
    line:
      description: The row as a fixed-width line under RV(header).
      type: str
  sample:
    host: gpufleet-demo-1
    strategy: ep8
    release: 0.5.9
    main_pid: 1234
    uptime: 5m12s
    ready_route: /health
    ready: true
    running: 3
    queued: 0
    gen_throughput: 195.0
    deployed_at: "2026-12-01T00:50:00Z"
    pd_role: null
    drift: []
    pending: []
    ok: true
"""

import os
import socket
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _command, _files, _paths
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _port_owner
from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout._health import parse_unit_show, readiness_path
from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout._server_unit import parse_record, read_bytes
from ansible_collections.gpufleet.sglang.plugins.module_utils.status._status import (
    UNREADABLE,
    cmdline_argv,
    drift,
    row,
    scheduler_metrics,
    table_header,
)

UNIT_PROPS = ["ActiveState", "SubState", "MainPID", "ExecMainStartTimestampMonotonic",
              "ActiveEnterTimestampMonotonic"]
DEFAULT_PORT = 30000
MAX_BODY = 4 * 1024 * 1024


def _sha1(path):
    """sha1 of a file, None when it does not exist, UNREADABLE when it cannot be read."""
    try:
        return _files.digest(path, "sha1")
    except (IOError, OSError):
        return UNREADABLE if os.path.lexists(path) else None


class Http(object):
    """GET on the host's loopback, never through a proxy, with a short timeout."""

    def __init__(self, timeout):
        self.timeout = timeout
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def get(self, url):
        """``(status, body, detail)``: status None when nothing answered."""
        try:
            response = self.opener.open(url, timeout=self.timeout)
            try:
                return response.getcode(), response.read(MAX_BODY), "%s" % response.getcode()
            finally:
                response.close()
        except urllib.error.HTTPError as exc:
            return exc.code, b"", "%s %s" % (exc.code, exc.reason)
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, socket.timeout):
                return None, b"", "timed out after %ss" % self.timeout
            text = getattr(reason, "strerror", None) or to_text(reason)
            return None, b"", to_text(text).lower()
        except (socket.timeout, OSError) as exc:
            if isinstance(exc, socket.timeout):
                return None, b"", "timed out after %ss" % self.timeout
            return None, b"", to_text(getattr(exc, "strerror", None) or exc).lower()


def unit_props(module, service):
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return {}
    cmd = [systemctl, "show", "%s.service" % service]
    for prop in UNIT_PROPS:
        cmd.extend(["-p", prop])
    result = _command.run(module, cmd, timeout=15)
    return parse_unit_show(result.stdout) if result.ok else {}


def readiness(http, base, release):
    try:
        route = readiness_path(release) if release else None
    except ValueError as exc:
        return {"route": None, "ready": False, "detail": to_text(exc)}
    if not route:
        return {"route": None, "ready": False, "detail": "the release is unknown (no record)"}
    status, dummy, detail = http.get(base + route)
    return {"route": route, "ready": status == 200, "detail": detail}


def metrics(http, base):
    out = {"detail": None, "running": None, "queued": None, "gen_throughput": None}
    status, body, detail = http.get(base + "/metrics")
    if status == 404:
        out["detail"] = "off (404: the server runs without --enable-metrics)"
        return out
    if status != 200:
        out["detail"] = "unavailable (%s)" % detail
        return out
    try:
        out.update(scheduler_metrics(body))
    except ValueError as exc:
        out["detail"] = "unreadable (%s)" % to_text(exc)
        return out
    out["detail"] = "ok"
    return out


def process_argv(props):
    """The main process's command line (for its PD flags), or None when it cannot be read."""
    try:
        pid = int(props.get("MainPID") or 0)
    except ValueError:
        return None
    if pid <= 0:
        return None
    return cmdline_argv(read_bytes("/proc/%d/cmdline" % pid))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str"),
            service=dict(type="str", default="sglang"),
            port=dict(type="int"),
            address=dict(type="str", default="127.0.0.1"),
            release=dict(type="str"),
            record_path=dict(type="path", default=_paths.RECORD_PATH),
            unit_dir=dict(type="path", default="/etc/systemd/system"),
            config_dir=dict(type="path", default="/etc/sglang"),
            request_timeout=dict(type="float", default=5.0),
            metrics=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["port"] is not None and not 0 < p["port"] < 65536:
        module.fail_json(msg="port must be between 1 and 65535, got %s" % p["port"])
    if p["request_timeout"] <= 0:
        module.fail_json(msg="request_timeout must be greater than 0, got %s" % p["request_timeout"])
    if not p["service"] or "/" in p["service"]:
        module.fail_json(msg="service must be a unit name without .service, got %r" % p["service"])
    if p["release"]:
        try:
            readiness_path(p["release"])
        except ValueError as exc:
            module.fail_json(msg="release: %s" % to_text(exc))

    record = parse_record(read_bytes(p["record_path"]))
    port = p["port"]
    if port is None:
        try:
            port = int(record.get("port") or DEFAULT_PORT)
        except (TypeError, ValueError):
            port = DEFAULT_PORT
    release = p["release"] or record.get("release")
    unit = "%s.service" % p["service"]
    unit_path = os.path.join(p["unit_dir"], unit)
    env_path = os.path.join(p["config_dir"], "%s.env" % p["service"])

    props = unit_props(module, p["service"])
    now_usec = int(time.monotonic() * 1000000)
    verdict = _port_owner.inspect(port, p["service"], props.get("ActiveState") == "active",
                                  record.get("port"))
    reasons = drift(record, _sha1(unit_path), _sha1(env_path), verdict)

    http = Http(p["request_timeout"])
    address = p["address"]
    base = "http://%s:%d" % ("[%s]" % address if ":" in address else address, port)
    ready = readiness(http, base, release)
    measured = metrics(http, base) if p["metrics"] else {"detail": "not read"}

    result = row(p["name"] or socket.gethostname(), record, props, now_usec, ready, measured, reasons,
                 port, unit, p["record_path"], process_argv(props))
    result["port_owner"] = verdict
    module.exit_json(changed=False, header=table_header(), row=result)


if __name__ == "__main__":
    main()
