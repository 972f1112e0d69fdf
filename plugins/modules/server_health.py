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
  - With O(unit), reads the server's own log lines of this start from the journal and
    reports the load phase it is in (starting, loading weights with shards done/total,
    allocating the KV cache, capturing CUDA graphs, warming up, ready) and how long each
    phase took. A timeout or a crash names the phase.
  - With O(progress_every), returns after that many seconds with RV(ready=false) and the
    phase when the server is not ready yet, so that a play can print the progress and call
    it again (see the server role's C(health_wait.yml)).
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
  progress_every:
    description:
      - When greater than 0, return after this many seconds with RV(ready=false) and the
        current phase if the server is not ready yet, instead of waiting up to O(timeout).
      - O(timeout) still ends the wait with a failure when it runs out first.
    type: int
    default: 0
  last_phase:
    description:
      - With O(progress_every), the phase the caller showed last; the module returns as soon
        as the server is in another phase, so that each phase is shown when it begins.
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
ready:
  description: Whether the server answered 200 on its readiness route.
  type: bool
  returned: success
phase:
  description:
    - The load phase reached, from the server's log lines and the port
      (V(starting), V(loading), V(kv_cache), V(cuda_graphs), V(warmup), V(ready)).
  type: str
  returned: always
  sample: loading
shards:
  description: Safetensors shards loaded so far, from SGLang's progress bar (null before the first one).
  type: dict
  returned: always
  sample: {"done": 32, "total": 64, "percent": 50}
phases:
  description: Each phase reached, in order, with the seconds spent in it.
  type: list
  elements: dict
  returned: always
  sample: [{"phase": "starting", "name": "starting (port not open yet)", "seconds": 0.4}]
summary:
  description: One line for the operator, for example V(loading weights 32/64 shards (50%\), 1m10s in this phase, 1m12s since start).
  type: str
  returned: always
journal:
  description: Last journal lines of O(unit), on failure.
  type: list
  elements: str
  returned: failure
"""

import json
import time
import traceback
from urllib.parse import urlparse

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _command, _waiter
from ansible_collections.gpufleet.sglang.plugins.module_utils.common._net import listening
from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout._load_phases import (
    LoadProgress,
    journal_message,
    journal_time,
)
from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout._health import (
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

UNIT_PROPS = ["ActiveState", "SubState", "Result", "NRestarts", "MainPID", "InvocationID",
              "ExecMainStartTimestamp"]


def _last_update(line):
    """A journal line without the progress updates that a later one overwrote."""
    if "\r" not in line:
        return line
    head, _sep, rest = line.partition("\r")
    updates = [u for u in rest.split("\r") if u.strip()]
    return head + (updates[-1] if updates else "")


class Waiter(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.systemctl = module.get_bin_path("systemctl") if self.params["unit"] else None
        self.journalctl = module.get_bin_path("journalctl") if self.params["unit"] else None
        self.polls = 0
        self.last_status = None
        self.invocation = None
        self.progress = LoadProgress(time.time())
        self.journal_read_at = None

    def unit_props(self):
        cmd = [self.systemctl, "show", self.params["unit"]]
        for prop in UNIT_PROPS:
            cmd.extend(["-p", prop])
        # Unix timestamps (systemd 248 and later); older systemd refuses the option.
        result = _command.run(self.module, cmd[:2] + ["--timestamp=unix"] + cmd[2:])
        if not result.ok:
            result = _command.run(self.module, cmd)
        if not result.ok:
            _command.fail(self.module, "cannot read the state of %s" % self.params["unit"], result)
        return parse_unit_show(result.stdout)

    def start_progress(self, props):
        """Follow the log lines of the start that runs now (the unit's invocation)."""
        self.invocation = props.get("InvocationID") or None
        started = props.get("ExecMainStartTimestamp", "")
        if started.startswith("@"):
            try:
                self.progress = LoadProgress(float(started[1:]))
            except ValueError:
                pass

    def read_progress(self, port_open, ready):
        """Fold this start's journal lines into the phase; the port and readiness too."""
        now = time.time()
        if self.journalctl and self.invocation and (
                ready or self.journal_read_at is None
                or now - self.journal_read_at >= max(self.params["interval"], 1.0)):
            self.journal_read_at = now
            result = _command.run(self.module, [
                self.journalctl, "_SYSTEMD_INVOCATION_ID=%s" % self.invocation, "-o", "json",
                "--output-fields=MESSAGE", "--no-pager"])
            fresh = LoadProgress(self.progress.started_at)
            for line in (result.stdout or "").splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict):
                    fresh.feed(journal_time(entry) or now, journal_message(entry))
            for key, at in sorted(self.progress.entered.items(), key=lambda kv: kv[1]):
                if key in ("warmup", "ready"):
                    fresh.enter(key, at)
            self.progress = fresh
        if port_open:
            self.progress.enter("warmup", now)
        if ready:
            self.progress.enter("ready", now)
        return self.progress.report(time.time())

    def journal(self):
        journalctl = self.module.get_bin_path("journalctl")
        if not (journalctl and self.params["unit"]):
            return []
        # -a: progress bars (tqdm's carriage returns) as text, not "[78B blob data]"; the
        # last update of each line is kept
        cmd = [journalctl, "-u", self.params["unit"], "-n", str(self.params["journal_lines"]),
               "--no-pager", "-o", "short-iso", "-a"]
        result = _command.run(self.module, cmd)
        return [_last_update(line) for line in (result.stdout or result.stderr).split("\n") if line]

    def fail(self, msg, **extra):
        report = self.progress.report(time.time())
        msg = "%s; it was %s" % (msg, report["summary"])
        extra.update(report)
        journal = self.journal()
        if journal:
            msg = "%s\nlast journal lines of %s:\n%s" % (msg, self.params["unit"], "\n".join(journal))
        self.module.fail_json(msg=msg, journal=journal, polls=self.polls,
                              last_status=self.last_status, **extra)

    def port_open(self, host, port):
        return listening(host, port, min(5.0, self.params["request_timeout"]))

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
        # one wait returns at readiness, at the next progress report or at the deadline
        stop_after = params["timeout"]
        if params["progress_every"] > 0:
            stop_after = min(stop_after, params["progress_every"])
        baseline = None
        if self.systemctl:
            props = self.unit_props()
            baseline = int(props.get("NRestarts", "0") or 0)
            self.start_progress(props)
        seen = {"port_open_after": None}
        session = requests.Session()

        def poll():
            if self.systemctl:
                reason = unit_failure(self.unit_props(), baseline)
                if reason:
                    self.read_progress(seen["port_open_after"] is not None, False)
                    self.fail("%s is not healthy: %s" % (params["unit"], reason), path=path)
            if seen["port_open_after"] is None and self.port_open(host, port):
                seen["port_open_after"] = time.monotonic() - start
            if seen["port_open_after"] is not None:
                self.polls += 1
                try:
                    response = session.get(base + path, headers=headers,
                                           timeout=params["request_timeout"])
                    self.last_status = response.status_code
                except requests.RequestException:
                    self.last_status = None
            ready = self.last_status == 200
            report = self.read_progress(seen["port_open_after"] is not None, ready)
            elapsed = time.monotonic() - start
            return dict(report, changed=False, path=path, polls=self.polls,
                        last_status=self.last_status, ready=ready, elapsed=round(elapsed, 3))

        done = _waiter.wait(poll, lambda result: stop_here(result, params), timeout=stop_after,
                            interval=params["interval"])
        result = done.value
        if result["ready"]:
            result.update(ready_at=time.time(),
                          port_open_after=round(seen["port_open_after"], 3))
            return result
        if result["elapsed"] >= params["timeout"]:
            state = "port %d never opened" % port if seen["port_open_after"] is None else (
                "%s last answered %s" % (path, self.last_status))
            waited = params["timeout"]
            if self.invocation:  # the wait goes on across calls: count from the start
                waited = max(waited, time.time() - self.progress.started_at)
            self.fail("server at %s not ready after %d s: %s" % (base, waited, state),
                      path=path)
        return result


def stop_here(result, params):
    """The health wait's readiness predicate: the server is ready, or (between progress
    reports) the load phase changed since the one the caller last saw."""
    if result["ready"]:
        return True
    return (params["progress_every"] > 0 and params["last_phase"] is not None
            and result["elapsed"] < params["timeout"] and result["phase"] != params["last_phase"])


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
            progress_every=dict(type="int", default=0),
            last_phase=dict(type="str"),
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
    if params["progress_every"] < 0:
        module.fail_json(msg="progress_every must be 0 (wait to the end) or more, got %s"
                         % params["progress_every"])
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
