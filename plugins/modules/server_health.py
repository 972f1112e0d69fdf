#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: server_health
short_description: Wait until an SGLang server really serves
version_added: 0.1.0
author: gpufleet developers (@gpufleet)
description:
  - Waits for the server's TCP port to open (nothing listens while the weights load),
    then polls the release's readiness route until it answers 200
    (V(/ready) on 0.5.23 and later, V(/health) on 0.5.x before that, V(/health_generate)
    on 0.4.x where V(/health) is always 200).
  - When O(unit) is given, fails at once if the systemd unit fails or its process dies
    while waiting, and shows the last journal lines, instead of waiting for the timeout.
  - Returns how long the wait took.
requirements:
  - requests
extends_documentation_fragment:
  - gpufleet.sglang._attributes
  - gpufleet.sglang._attributes.info_module
options:
  url:
    description: Base URL of the server.
    type: str
    default: http://127.0.0.1:30000
  release:
    description:
      - The SGLang release that runs, to pick the readiness route.
      - Ignored when O(path) is set.
    type: str
  path:
    description: Readiness route to poll instead of the one chosen from O(release).
    type: str
  timeout:
    description:
      - Seconds to wait in total. Large models take 6 to 10 minutes to load, so the
        default is 30 minutes.
    type: int
    default: 1800
  interval:
    description: Seconds between polls.
    type: float
    default: 2.0
  request_timeout:
    description: Seconds one HTTP request may take (SGLang's health probe itself runs a generation).
    type: float
    default: 10.0
  unit:
    description: systemd unit that runs the server; watched to fail fast.
    type: str
  journal_lines:
    description: Journal lines of O(unit) to show on failure.
    type: int
    default: 40
  api_key:
    description: API key sent as a bearer token (health routes do not need it).
    type: str
"""

EXAMPLES = r"""
- name: Wait until SGLang serves
  gpufleet.sglang.server_health:
    url: http://127.0.0.1:30000
    release: 0.5.9
    unit: sglang.service
    timeout: 1800
  register: health
"""

RETURN = r"""
path:
  description: The readiness route that was polled.
  type: str
  returned: always
  sample: /health
elapsed:
  description: Seconds from the start of the wait until the server was ready.
  type: float
  returned: success
port_open_after:
  description: Seconds until the TCP port accepted connections.
  type: float
  returned: success
ready_at:
  description: Wall-clock time (seconds since the epoch) of the first 200 answer.
  type: float
  returned: success
polls:
  description: HTTP polls made.
  type: int
  returned: always
last_status:
  description: Last HTTP status seen (null when the port never answered).
  type: int
  returned: always
journal:
  description: Last journal lines of O(unit), on failure.
  type: list
  elements: str
  returned: failure
"""

import socket
import time
import traceback
from urllib.parse import urlparse

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpufleet.sglang.plugins.module_utils import _command
from ansible_collections.gpufleet.sglang.plugins.module_utils._health import (
    parse_unit_show,
    readiness_path,
    unit_failure,
)

try:
    import requests
except ImportError:
    REQUESTS_IMPORT_ERROR = traceback.format_exc()
    requests = None
else:
    REQUESTS_IMPORT_ERROR = None

UNIT_PROPS = ["ActiveState", "SubState", "Result", "NRestarts", "MainPID"]


class Waiter(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.systemctl = module.get_bin_path("systemctl") if self.params["unit"] else None
        self.polls = 0
        self.last_status = None

    def unit_props(self):
        cmd = [self.systemctl, "show", self.params["unit"]]
        for prop in UNIT_PROPS:
            cmd.extend(["-p", prop])
        result = _command.run(self.module, cmd)
        if not result.ok:
            _command.fail(self.module, "cannot read the state of %s" % self.params["unit"], result)
        return parse_unit_show(result.stdout)

    def journal(self):
        journalctl = self.module.get_bin_path("journalctl")
        if not (journalctl and self.params["unit"]):
            return []
        cmd = [journalctl, "-u", self.params["unit"], "-n", str(self.params["journal_lines"]),
               "--no-pager", "-o", "short-iso"]
        result = _command.run(self.module, cmd)
        return (result.stdout or result.stderr).splitlines()

    def fail(self, msg, **extra):
        journal = self.journal()
        if journal:
            msg = "%s\nlast journal lines of %s:\n%s" % (msg, self.params["unit"], "\n".join(journal))
        self.module.fail_json(msg=msg, journal=journal, polls=self.polls,
                              last_status=self.last_status, **extra)

    def port_open(self, host, port):
        try:
            sock = socket.create_connection((host, port), timeout=min(5.0, self.params["request_timeout"]))
        except (OSError, socket.error):
            return False
        sock.close()
        return True

    def run(self):
        params = self.params
        path = params["path"] or readiness_path(params["release"])
        base = params["url"].rstrip("/")
        parsed = urlparse(base)
        host = parsed.hostname or "127.0.0.1"
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        headers = {}
        if params["api_key"]:
            headers["Authorization"] = "Bearer %s" % params["api_key"]

        start = time.monotonic()
        deadline = start + params["timeout"]
        baseline = None
        if self.systemctl:
            props = self.unit_props()
            baseline = int(props.get("NRestarts", "0") or 0)
        port_open_after = None
        session = requests.Session()
        while True:
            if self.systemctl:
                reason = unit_failure(self.unit_props(), baseline)
                if reason:
                    self.fail("%s is not healthy: %s" % (params["unit"], reason), path=path)
            if port_open_after is None and self.port_open(host, port):
                port_open_after = time.monotonic() - start
            if port_open_after is not None:
                self.polls += 1
                try:
                    response = session.get(base + path, headers=headers,
                                           timeout=params["request_timeout"])
                    self.last_status = response.status_code
                except requests.RequestException:
                    self.last_status = None
                if self.last_status == 200:
                    ready_at = time.time()
                    return {
                        "ready_at": ready_at,
                        "changed": False,
                        "path": path,
                        "elapsed": round(time.monotonic() - start, 3),
                        "port_open_after": round(port_open_after, 3),
                        "polls": self.polls,
                        "last_status": self.last_status,
                    }
            now = time.monotonic()
            if now >= deadline:
                state = "port %d never opened" % port if port_open_after is None else (
                    "%s last answered %s" % (path, self.last_status))
                self.fail("server at %s not ready after %d s: %s" % (base, params["timeout"], state),
                          path=path)
            time.sleep(min(params["interval"], max(0.05, deadline - now)))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:30000"),
            release=dict(type="str"),
            path=dict(type="str"),
            timeout=dict(type="int", default=1800),
            interval=dict(type="float", default=2.0),
            request_timeout=dict(type="float", default=10.0),
            unit=dict(type="str"),
            journal_lines=dict(type="int", default=40),
            api_key=dict(type="str", no_log=True),
        ),
        required_one_of=[("release", "path")],
        supports_check_mode=True,
    )
    if requests is None:
        module.fail_json(msg=missing_required_lib("requests"), exception=REQUESTS_IMPORT_ERROR)
    params = module.params
    for name in ("timeout", "interval", "request_timeout", "journal_lines"):
        if params[name] is not None and params[name] <= 0:
            module.fail_json(msg="%s must be greater than 0, got %s" % (name, params[name]))
    if params["path"] and not params["path"].startswith("/"):
        module.fail_json(msg="path must start with '/', got %r" % params["path"])
    if not params["url"].startswith(("http://", "https://")):
        module.fail_json(msg="url must start with http:// or https://, got %r" % params["url"])
    if not params["path"]:
        try:
            readiness_path(params["release"])
        except ValueError as exc:
            module.fail_json(msg=str(exc))
    module.exit_json(**Waiter(module).run())


if __name__ == "__main__":
    main()
