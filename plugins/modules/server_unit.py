#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: server_unit
short_description: Own the SGLang server's systemd unit, its environment file and its rollback
version_added: 0.1.0
author: gpufleet developers (@gpufleet)
description:
  - Renders the systemd unit of the SGLang server (hardened as docs/hardening.md
    describes) and its root-owned 0600 environment file, which alone holds the secrets.
    With an API key the unit starts SGLang through the launcher O(secret_exec), which
    takes the key from C(SGLANG_API_KEY) in the environment file and passes it as
    C(--api-key) inside the process, so that neither the unit, the task output, the
    process list (C(/proc/<pid>/cmdline)) nor the journal carries the value (the launcher
    redacts it from what the server prints).
  - With O(state=present), compares what the rendered files would run with what the
    installed server runs (the run spec, which is the exact argv, the environment from the
    environment file and C(Environment=), user, group, supplementary groups and device
    access, C(Limit*=), the working directory, the release, the venv and the model path).
    Comments, the order of directives and directives that take effect without a restart
    are not part of it (docs/hardening.md classifies every directive).
  - When the files differ by a byte, it stages them in C(<config_dir>/staging/), checks the
    staged unit with C(systemd-analyze verify) (when O(verify)), keeps the installed unit,
    environment file and deployment record in C(<config_dir>/last-good/), installs the new
    files atomically and runs C(systemctl daemon-reload). RV(restart) is true only when what
    runs changed (or on a first install). A change of reload-only directives (C(Description=),
    C(Restart=), C(RestartSec=), C(StartLimit*=), C(TimeoutStopSec=), C(KillMode=), ...) is
    reported in RV(reload), and that daemon-reload puts it in effect, with no restart and nothing
    pending (C([Install]) is read by C(systemctl enable) only); a change of sandboxing
    options, which systemd applies only when it starts the process, is RV(pending) until the
    next restart, or restarts now with O(apply_pending). It never restarts the server itself;
    the caller restarts it (typically through a handler), so every rank of a multi-node server
    restarts in the same step.
  - Enables the unit when it is not enabled. When the files did not change, O(start) is
    true and the unit is not active, starts it (RV(started=true)).
  - With O(state=rolled_back), puts the last known good unit, environment file and
    record back, reloads systemd and restarts the server.
  - The deployment record (O(record_path), a local fact file) holds C(strategy),
    C(layout), C(release), C(argv), C(unit_sha1), C(env_sha1), C(service), C(port),
    C(deployed_at), C(run_sha256) (the digest of what runs, of C(run_spec_version)),
    C(pending) and C(pending_pid) (the main PID that runs without them), and
    C(restart_owed_pid) (the main PID that a restart decided here is to replace); C(deployed_at)
    changes only when the server is (re)installed or restarted.
  - A restart is owed while the process of C(restart_owed_pid) still runs, because the files
    were installed for a restart that never came (the controller stopped between the install
    and the handler); the next run then restarts although the installed files equal the new ones. A record without
    C(run_sha256) (written by 0.1.0), or one that no longer describes the installed
    files, is not used; what runs is then read from the installed unit and environment file.
extends_documentation_fragment:
  - gpufleet.sglang._attributes
attributes:
  check_mode:
    support: full
    details:
      - Writes nothing on the host (no directories, staging files, installed files or
        record) and runs no C(systemctl) command that changes state; C(changed),
        RV(restart), RV(started) and the diff are still computed.
      - When the files would change and O(verify) is true, C(systemd-analyze verify)
        runs on a copy of the new unit (not the environment file) in a private
        temporary directory that is removed again.
      - With O(state=rolled_back) it only reports C(changed=true) and the record it
        would restore.
  diff_mode:
    support: full
    details:
      - Returns the unit's text before and after, and the environment file's variable
        names only, every value masked as C(***).
  idempotent:
    support: full
seealso:
  - module: gpufleet.sglang.server_health
    description: Wait until the (re)started server is ready.
  - module: gpufleet.sglang.server_flags
    description: Render the launch_server argv passed as O(argv).
options:
  state:
    description:
      - V(present) installs the rendered unit and environment file.
      - V(rolled_back) restores the last known good configuration and restarts the server.
    type: str
    choices: [present, rolled_back]
    default: present
  service_name:
    description: Name of the systemd service (without C(.service)).
    type: str
    default: sglang
  python:
    description:
      - Interpreter of the SGLang virtualenv; the unit runs C(<python> -m sglang.launch_server).
      - Required with O(state=present).
    type: path
  argv:
    description:
      - The launch_server arguments (flags and values as separate items), for example
        the C(argv) that M(gpufleet.sglang.server_flags) returns. Each C(--flag) starts a
        line of C(ExecStart=); the values that follow it join that line.
      - Required with O(state=present).
    type: list
    elements: str
  api_key:
    description:
      - API key of the server. Written only to the environment file; the unit starts
        through O(secret_exec), which passes it on. Empty for none.
    type: str
  secret_exec:
    description:
      - The collection's launcher on the host (the server role installs it when
        C(server_api_key) is set). Used only with O(api_key); a missing file fails the
        task before anything changes.
    type: path
    default: /usr/local/libexec/gpufleet-sglang/secret_exec.py
  hf_token:
    description: Hugging Face token, written only to the environment file as C(HF_TOKEN).
    type: str
  environment:
    description: Further (non-secret) environment of the server, written sorted by name.
    type: dict
    default: {}
  pp_layer_partition:
    description: PP layer split, written to the environment as C(SGLANG_PP_LAYER_PARTITION).
    type: str
  user:
    description: Account the server runs as. It must exist.
    type: str
    default: sglang
  group:
    description: Primary group of the server. It must exist.
    type: str
    default: sglang
  device_groups:
    description: Supplementary groups that give the account access to the GPU devices.
    type: list
    elements: str
    default: [video]
  home:
    description: Home and working directory of the server, created owned by O(user):O(group) with mode 0750.
    type: path
    default: /var/lib/sglang
  config_dir:
    description:
      - Directory of the environment file, created root-owned with mode 0700, with its
        C(staging) and C(last-good) subdirectories.
    type: path
    default: /etc/sglang
  unit_dir:
    description: Directory the unit file is installed in.
    type: path
    default: /etc/systemd/system
  restart_sec:
    description: C(RestartSec=) of the unit, in seconds.
    type: int
    default: 10
  start_limit_burst:
    description: C(StartLimitBurst=) of the unit.
    type: int
    default: 3
  start_limit_interval_sec:
    description: C(StartLimitIntervalSec=) of the unit, in seconds.
    type: int
    default: 3600
  timeout_stop_sec:
    description: C(TimeoutStopSec=) of the unit, in seconds.
    type: int
    default: 120
  strategy:
    description: Name of the parallel strategy; defaults to the C(name) of O(layout).
    type: str
  layout:
    description:
      - The strategy's layout (the C(strategy_plan) filter's result); needs C(tp), C(pp),
        C(ep) and C(dp). Written to the unit's comment and the record.
      - Required with O(state=present).
    type: dict
  release:
    description:
      - The SGLang release of O(python), written to the unit's description and the record.
      - Required with O(state=present).
    type: str
  port:
    description: HTTP port of the server, for the record. Defaults to the value of C(--port) in O(argv).
    type: int
  server_args:
    description:
      - What the release derived from the launch flags (O(argv)) and
        what it changed against what was asked (M(gpufleet.sglang.server_preflight)'s
        C(server_args)), written to the record as C(server_args). Empty writes nothing.
    type: dict
    default: {}
  record_path:
    description: Deployment record (a local fact file); its directory is created with mode 0755.
    type: path
    default: /etc/ansible/facts.d/sglang.fact
  verify:
    description: Check a changed unit with C(systemd-analyze verify) before installing it.
    type: bool
    default: true
  start:
    description: Start the unit when the files did not change and it is not active.
    type: bool
    default: true
  apply_pending:
    description:
      - Restart the server (RV(restart=true)) when changes that wait for the next restart are
        pending (RV(pending)), that is sandboxing options installed earlier, or now, while the same
        process runs. Nothing is restarted when nothing is pending.
    type: bool
    default: false
  manage_account:
    description:
      - Create the system group O(group), the O(device_groups) and the system user O(user)
        (no login shell, home O(home), not created) when they are missing, and fix the
        user's primary group, supplementary groups, home and shell when they differ.
      - Read from the group and password databases; nothing runs when all is as wanted.
    type: bool
    default: true
notes:
  - Only what the unit and the environment file run decide RV(restart). A record that differs
    (for example a changed O(port) alone) is rewritten, which reports C(changed) but no
    restart.
  - The previous configuration is kept as last known good only when both an installed
    unit and an installed environment file exist. A stale last-good record is removed
    when no installed record exists.
  - The account, its groups and the device groups are not created by this module.
"""

EXAMPLES = r"""
- name: Install the SGLang server's unit and environment
  gpufleet.sglang.server_unit:
    python: /opt/sglang/0.5.9/bin/python
    argv: "{{ server_flags.argv }}"
    api_key: "{{ server_api_key }}"
    hf_token: "{{ server_hf_token }}"
    environment:
      NCCL_DEBUG: WARN
    strategy: "{{ server_layout.name }}"
    layout: "{{ server_layout }}"
    release: "{{ server_flags.version }}"
    port: 30000
  register: server_unit
  notify: Restart the SGLang server

- name: Put the last known good server back
  gpufleet.sglang.server_unit:
    state: rolled_back
  register: server_rollback

- name: Say what was restored
  ansible.builtin.debug:
    msg: "back on {{ server_rollback.restored.strategy }}, SGLang {{ server_rollback.restored.release }}"
"""

RETURN = r"""
restart:
  description:
    - Whether what the server runs changed (or it is a first install, or O(apply_pending)
      applies RV(pending)), so the caller must restart the server. Always false with
      O(state=rolled_back), which restarts it itself.
  returned: always
  type: bool
action:
  description:
    - V(install) (first install), V(restart) (what runs changed), V(apply_pending),
      V(pending) (sandboxing installed, applies at the next restart), V(reload) (reload-only
      directives installed, in effect from the daemon-reload), V(comments) (only comments
      differ) or V(none).
  returned: when O(state=present)
  type: str
run_changes:
  description: The fields of what runs that changed (C(argv), C(environment), C(user), ...).
  returned: when O(state=present)
  type: list
  elements: str
reload:
  description:
    - Reload-only directives (C(Section.Key)) installed now. The step's C(systemctl daemon-reload)
      puts them in effect (systemd's manager reads them from the unit it loaded), with no restart;
      they are never RV(pending). C(Install.*) is read by C(systemctl enable) only.
  returned: when O(state=present)
  type: list
  elements: str
pending:
  description: Directives (C(Section.Key)) installed but not applied to the running process.
  returned: when O(state=present)
  type: list
  elements: str
applied:
  description: The pending directives the restart that O(apply_pending) asked for applies.
  returned: when O(state=present)
  type: list
  elements: str
byte_rule_restart:
  description: Whether the rule of 0.1.0 (restart when either file differs by a byte) would have restarted.
  returned: when O(state=present)
  type: bool
previous_from:
  description:
    - Where what the installed server runs was read from, V(record) (its C(run_sha256)) or
      V(files) (the installed unit and environment file); null on a first install.
  returned: when O(state=present)
  type: str
summary:
  description: One line on what the step did, for the rollout's report.
  returned: when O(state=present)
  type: str
  sample: "pending: applies at the next restart: Service.PrivateMounts"
started:
  description: Whether the module started the stopped unit (files unchanged, O(start) true).
  returned: always
  type: bool
restarted:
  description: Whether the module restarted the unit itself (only O(state=rolled_back) does).
  returned: always
  type: bool
account_changed:
  description: Whether the account (group, device groups, user) was or would be created or fixed.
  returned: when O(state=present)
  type: bool
unit_path:
  description: Path of the installed unit.
  returned: always
  type: str
  sample: /etc/systemd/system/sglang.service
env_path:
  description: Path of the installed environment file.
  returned: always
  type: str
  sample: /etc/sglang/sglang.env
unit_sha1:
  description: sha1 of the unit text that is (or would be) installed.
  returned: always
  type: str
unit_changed:
  description: Whether the unit text differs from the installed one.
  returned: always
  type: bool
env_changed:
  description: Whether the environment file differs from the installed one.
  returned: always
  type: bool
record_changed:
  description: Whether the deployment record was (or would be) rewritten.
  returned: always
  type: bool
has_last_good:
  description:
    - With O(state=present), whether an installed unit and environment file existed
      before this run, so there is something to roll back to.
    - With O(state=rolled_back), whether a last known good configuration exists.
  returned: always
  type: bool
record:
  description: The deployment record now on disk (in check mode, the one that would be).
  returned: always
  type: dict
  sample:
    strategy: tp8
    layout: {tp: 8, pp: 1, ep: 1, dp: 1, name: tp8, nnodes: 1, gpus: 8}
    release: 0.5.9
    argv: [--model-path, /models/kimi-k2, --tp-size, "8"]
    unit_sha1: 3f786850e387550fdab836ed7e6dc881de23001b
    env_sha1: 89e6c98d92887913cadf06b2adb97f26cde4849b
    run_sha256: 9f2c4d0e6b1a7c3e5f8d2b4a6c8e0f1a3b5d7e9f1c3a5b7d9e1f3a5c7b9d1e3f
    run_spec_version: 1
    pending: []
    pending_pid: null
    restart_owed_pid: 81234
    service: sglang
    port: 30000
    deployed_at: "2025-01-31T12:00:00Z"
restored:
  description: The record restored from the last known good configuration ({} when it had none).
  returned: when O(state=rolled_back)
  type: dict
active:
  description: Whether the unit is active after the run (in check mode, predicted).
  returned: always
  type: bool
enabled:
  description: Whether the unit is enabled after the run (in check mode, predicted).
  returned: always
  type: bool
"""

import datetime
import grp
import os
import pwd
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_text

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _command, _files, _paths
from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout._server_unit import (
    account_settings,
    decide,
    mask_env,
    parse_record,
    plan,
    read_bytes,
    record,
    record_text,
    render_env,
    render_unit,
    summary,
    useradd_args,
    usermod_args,
)

# Owner and group of the configuration files and directories (a seam for the tests).
ROOT_OWNER = "root"
ROOT_GROUP = "root"

VERIFY_TIMEOUT = 120
SYSTEMCTL_TIMEOUT = 300


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


class ServerUnit(object):
    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.check = module.check_mode
        self.changed = False
        service = self.p["service_name"]
        self.unit_name = "%s.service" % service
        self.unit_path = os.path.join(self.p["unit_dir"], self.unit_name)
        self.env_path = os.path.join(self.p["config_dir"], "%s.env" % service)
        self.staging_dir = os.path.join(self.p["config_dir"], "staging")
        self.last_good_dir = os.path.join(self.p["config_dir"], "last-good")
        self.record_path = self.p["record_path"]
        self.record_name = os.path.basename(self.record_path)
        self.last_good = {
            "unit": os.path.join(self.last_good_dir, self.unit_name),
            "env": os.path.join(self.last_good_dir, "%s.env" % service),
            "record": os.path.join(self.last_good_dir, self.record_name),
        }
        self._systemctl = None

    # ----------------------------------------------------------------- host helpers
    @property
    def systemctl(self):
        if self._systemctl is None:
            self._systemctl = self.module.get_bin_path("systemctl", required=True)
        return self._systemctl

    def command(self, argv, what, timeout=SYSTEMCTL_TIMEOUT, check_rc=True):
        result = _command.run(self.module, argv, timeout=timeout)
        if check_rc and not result.ok:
            _command.fail(self.module, "%s failed: %s" % (
                what, result.last_line("stderr") or result.last_line("stdout") or "rc %s" % result.rc),
                result)
        return result

    def is_active(self):
        result = self.command([self.systemctl, "is-active", self.unit_name], "systemctl is-active",
                              check_rc=False)
        return result.ok

    def main_pid(self):
        """The unit's running main PID, None when it has none (or systemctl cannot tell)."""
        result = self.command([self.systemctl, "show", "--property=MainPID", "--value", self.unit_name],
                              "systemctl show", check_rc=False)
        if not result.ok:
            return None
        try:
            return int(result.stdout.strip()) or None
        except ValueError:
            return None

    def is_enabled(self):
        result = self.command([self.systemctl, "is-enabled", self.unit_name], "systemctl is-enabled",
                              check_rc=False)
        return result.ok

    def ensure_dir(self, path, owner, group, mode):
        """Create ``path`` (or fix its owner, group and mode); return whether it changed."""
        changed = False
        if not os.path.isdir(path):
            if os.path.lexists(path):
                self.module.fail_json(msg="%s exists and is not a directory" % path)
            if self.check:
                return True
            try:
                os.makedirs(path)
            except OSError as exc:
                self.module.fail_json(msg="cannot create %s: %s" % (path, to_text(exc)))
            changed = True
        changed = self.module.set_owner_if_different(path, owner, changed)
        changed = self.module.set_group_if_different(path, group, changed)
        changed = self.module.set_mode_if_different(path, mode, changed)
        return changed

    def write_atomic(self, path, data, mode):
        """Write ``data`` to ``path`` with the collection's atomic writer, root-owned and in
        the directory's default SELinux context."""
        def own(tmp):
            self.module.set_owner_if_different(tmp, ROOT_OWNER, False)
            self.module.set_group_if_different(tmp, ROOT_GROUP, False)
            self.module.set_default_selinux_context(tmp, False)
        _files.write_atomic(path, data, mode=mode, before_rename=own)

    # ----------------------------------------------------------------- the account
    def ensure_group(self, name):
        """Create the system group ``name`` when it does not exist; return whether it changed."""
        try:
            grp.getgrnam(name)
            return False
        except KeyError:
            pass
        if not self.check:
            groupadd = self.module.get_bin_path("groupadd", required=True)
            self.command([groupadd, "--system", name], "groupadd %s" % name)
        return True

    def ensure_account(self):
        """The server's system account: its group, the device groups, then the user.

        Read from the group and password databases (no command runs on a no-op); only what
        is missing or different is fixed, with groupadd/useradd/usermod.
        """
        p = self.p
        changed = False
        for name in [p["group"]] + list(p["device_groups"]):
            changed |= self.ensure_group(name)
        wanted = account_settings(p)
        try:
            entry = pwd.getpwnam(p["user"])
        except KeyError:
            entry = None
        if entry is None:
            if not self.check:
                useradd = self.module.get_bin_path("useradd", required=True)
                self.command([useradd] + useradd_args(wanted), "useradd %s" % p["user"])
            return True
        members = dict((g, p["user"] in self._members(g)) for g in p["device_groups"])
        current = {"gid": entry.pw_gid, "home": entry.pw_dir, "shell": entry.pw_shell}
        args = usermod_args(wanted, current, self._gid(p["group"]), members)
        if args:
            if not self.check:
                usermod = self.module.get_bin_path("usermod", required=True)
                self.command([usermod] + args, "usermod %s" % p["user"])
            changed = True
        return changed

    def _members(self, group):
        try:
            return grp.getgrnam(group).gr_mem
        except KeyError:
            return []

    def _gid(self, group):
        try:
            return grp.getgrnam(group).gr_gid
        except KeyError:
            return None

    # ----------------------------------------------------------------- state=present
    def verify(self, unit_text):
        """``systemd-analyze verify`` of the new unit; fail with its output when it refuses it."""
        analyze = self.module.get_bin_path("systemd-analyze", required=True)
        if self.check:
            # private copy, removed again: check mode leaves nothing on the host
            scratch = tempfile.mkdtemp(prefix="server_unit-verify-")
            try:
                path = os.path.join(scratch, self.unit_name)
                with open(path, "wb") as handle:
                    handle.write(unit_text)
                result = _command.run(self.module, [analyze, "verify", path], timeout=VERIFY_TIMEOUT)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        else:
            path = os.path.join(self.staging_dir, self.unit_name)
            result = _command.run(self.module, [analyze, "verify", path], timeout=VERIFY_TIMEOUT)
        if not result.ok:
            detail = (result.stderr.strip() or result.stdout.strip() or "rc %s" % result.rc)
            _command.fail(self.module, "systemd-analyze verify refused the new unit %s; nothing was "
                          "installed:\n%s" % (self.unit_name, detail), result)

    def keep_last_good(self):
        """Copy the installed unit, environment file and record to last-good/."""
        self.write_atomic(self.last_good["unit"], read_bytes(self.unit_path), 0o644)
        self.write_atomic(self.last_good["env"], read_bytes(self.env_path), 0o600)
        current_record = read_bytes(self.record_path)
        if current_record is not None:
            self.write_atomic(self.last_good["record"], current_record, 0o644)
        elif os.path.lexists(self.last_good["record"]):
            os.unlink(self.last_good["record"])

    def present(self):
        p = self.p
        try:
            unit_text = to_bytes(render_unit(p), errors="surrogate_or_strict")
            env_text = to_bytes(render_env(p), errors="surrogate_or_strict")
        except ValueError as exc:
            self.module.fail_json(msg="cannot render the unit: %s" % to_text(exc))
        unit_sha1 = _files.digest_bytes(unit_text, "sha1")

        installed_unit = read_bytes(self.unit_path)
        installed_env = read_bytes(self.env_path)
        previous_record_text = read_bytes(self.record_path)
        previous_record = parse_record(previous_record_text)
        decision = plan(installed_unit, installed_env, unit_text, env_text, self.env_path,
                        p["release"], previous_record, self.main_pid(), p["apply_pending"])
        restart = decision["restart"]

        # the account, then the directories (check mode: predicted only)
        account_changed = self.ensure_account() if p["manage_account"] else False
        self.changed |= account_changed
        dirs_changed = False
        if not (self.check and account_changed):
            dirs_changed |= self.ensure_dir(p["home"], p["user"], p["group"], "0750")
        else:
            dirs_changed = True  # the account does not exist yet in check mode
        for path in (p["config_dir"], self.staging_dir, self.last_good_dir):
            dirs_changed |= self.ensure_dir(path, ROOT_OWNER, ROOT_GROUP, "0700")
        dirs_changed |= self.ensure_dir(os.path.dirname(self.record_path) or ".", ROOT_OWNER,
                                        ROOT_GROUP, "0755")
        self.changed |= dirs_changed

        new_record = record(previous_record, p, unit_sha1, _now(), restart,
                            env_sha1=_files.digest_bytes(env_text, "sha1"), decision=decision)
        new_record_text = to_bytes(record_text(new_record))
        record_changed = previous_record_text != new_record_text

        if decision["install"]:
            if not self.check:
                self.write_atomic(os.path.join(self.staging_dir, "%s.env" % p["service_name"]),
                                  env_text, 0o600)
                self.write_atomic(os.path.join(self.staging_dir, self.unit_name), unit_text, 0o644)
            if p["verify"]:
                self.verify(unit_text)
            if not self.check:
                if decision["has_last_good"]:
                    self.keep_last_good()
                self.write_atomic(self.env_path, env_text, 0o600)
                self.write_atomic(self.unit_path, unit_text, 0o644)
                self.write_atomic(self.record_path, new_record_text, 0o644)
                self.command([self.systemctl, "daemon-reload"], "systemctl daemon-reload")
            self.changed = True
        elif record_changed:
            if not self.check:
                self.write_atomic(self.record_path, new_record_text, 0o644)
            self.changed = True
        # a restart to apply what is pending writes no file but is a change (the handler)
        self.changed |= restart

        # enabled
        enabled = self.is_enabled()
        if not enabled:
            if not self.check:
                self.command([self.systemctl, "enable", self.unit_name], "systemctl enable")
            enabled = True
            self.changed = True

        # started (only when nothing changed: a restart after a change is the caller's)
        active = self.is_active()
        started = False
        if not restart and p["start"] and not active:
            if not self.check:
                self.command([self.systemctl, "start", self.unit_name], "systemctl start")
                active = self.is_active()
            else:
                active = True
            started = True
            self.changed = True

        result = dict(
            changed=self.changed,
            restart=restart,
            started=started,
            restarted=False,
            account_changed=account_changed,
            unit_path=self.unit_path,
            env_path=self.env_path,
            unit_sha1=unit_sha1,
            unit_changed=decision["unit_changed"],
            env_changed=decision["env_changed"],
            record_changed=record_changed,
            has_last_good=decision["has_last_good"],
            action=decision["action"],
            run_changes=decision["run_changes"],
            reload=decision["reload"],
            pending=decision["pending"],
            applied=decision["applied"],
            byte_rule_restart=decision["byte_rule_restart"],
            previous_from=decision["previous_from"],
            summary=summary(decision),
            record=new_record,
            active=active,
            enabled=enabled,
        )
        if self.module._diff:
            result["diff"] = self.diff(installed_unit, unit_text, installed_env, env_text)
        return result

    # ----------------------------------------------------------------- state=rolled_back
    def rolled_back(self):
        good_unit = read_bytes(self.last_good["unit"])
        good_env = read_bytes(self.last_good["env"])
        if good_unit is None or good_env is None:
            self.module.fail_json(
                msg="no last known good configuration: %s and %s must both exist"
                    % (self.last_good["unit"], self.last_good["env"]),
                has_last_good=False)
        good_record_text = read_bytes(self.last_good["record"])
        restored = parse_record(good_record_text)
        installed_unit = read_bytes(self.unit_path)
        installed_env = read_bytes(self.env_path)
        installed_record_text = read_bytes(self.record_path)
        files = decide(installed_unit, installed_env, good_unit, good_env)
        record_changed = good_record_text is not None and good_record_text != installed_record_text

        active = True
        if not self.check:
            self.write_atomic(self.unit_path, good_unit, 0o644)
            self.write_atomic(self.env_path, good_env, 0o600)
            if good_record_text is not None:
                self.ensure_dir(os.path.dirname(self.record_path) or ".", ROOT_OWNER, ROOT_GROUP, "0755")
                self.write_atomic(self.record_path, good_record_text, 0o644)
            self.command([self.systemctl, "daemon-reload"], "systemctl daemon-reload")
            self.command([self.systemctl, "restart", self.unit_name], "systemctl restart")
            active = self.is_active()

        result = dict(
            changed=True,
            restart=False,
            started=False,
            restarted=not self.check,
            unit_path=self.unit_path,
            env_path=self.env_path,
            unit_sha1=_files.digest_bytes(good_unit, "sha1"),
            unit_changed=files["unit_changed"],
            env_changed=files["env_changed"],
            record_changed=record_changed,
            has_last_good=True,
            record=restored if good_record_text is not None else parse_record(installed_record_text),
            restored=restored,
            active=active,
            enabled=True if self.check else self.is_enabled(),
        )
        if self.module._diff:
            result["diff"] = self.diff(installed_unit, good_unit, installed_env, good_env)
        return result

    # ----------------------------------------------------------------- diff
    def diff(self, old_unit, new_unit, old_env, new_env):
        return [
            dict(before_header=self.unit_path, after_header=self.unit_path,
                 before=to_text(old_unit or b""), after=to_text(new_unit)),
            dict(before_header="%s (values masked)" % self.env_path,
                 after_header="%s (values masked)" % self.env_path,
                 before=mask_env(old_env), after=mask_env(new_env)),
        ]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", default="present", choices=["present", "rolled_back"]),
            service_name=dict(type="str", default="sglang"),
            python=dict(type="path"),
            argv=dict(type="list", elements="str"),
            api_key=dict(type="str", no_log=True),
            secret_exec=dict(type="path", default=_paths.SECRET_EXEC_PATH),
            hf_token=dict(type="str", no_log=True),
            environment=dict(type="dict", default={}),
            pp_layer_partition=dict(type="str"),
            user=dict(type="str", default="sglang"),
            group=dict(type="str", default="sglang"),
            device_groups=dict(type="list", elements="str", default=["video"]),
            home=dict(type="path", default="/var/lib/sglang"),
            config_dir=dict(type="path", default="/etc/sglang"),
            unit_dir=dict(type="path", default="/etc/systemd/system"),
            restart_sec=dict(type="int", default=10),
            start_limit_burst=dict(type="int", default=3),
            start_limit_interval_sec=dict(type="int", default=3600),
            timeout_stop_sec=dict(type="int", default=120),
            strategy=dict(type="str"),
            layout=dict(type="dict"),
            release=dict(type="str"),
            port=dict(type="int"),
            record_path=dict(type="path", default=_paths.RECORD_PATH),
            server_args=dict(type="dict", default={}),
            verify=dict(type="bool", default=True),
            start=dict(type="bool", default=True),
            manage_account=dict(type="bool", default=True),
            apply_pending=dict(type="bool", default=False),
        ),
        required_if=[("state", "present", ("python", "argv", "layout", "release"))],
        supports_check_mode=True,
    )
    name = module.params["service_name"]
    if not name or "/" in name or name.endswith(".service"):
        module.fail_json(msg="service_name must be a plain unit name without .service, got %r" % name)
    server = ServerUnit(module)
    if module.params["state"] == "present":
        if not module.params["argv"]:
            module.fail_json(msg="argv must not be empty")
        if module.params["api_key"] and not os.path.isfile(module.params["secret_exec"]):
            module.fail_json(msg="server_api_key is set but the launcher %s is not installed "
                                 "(the server role's prepare step installs it)"
                                 % module.params["secret_exec"])
        result = server.present()
    else:
        result = server.rolled_back()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
