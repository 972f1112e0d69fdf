"""server_unit run in-process against a temporary root with fake systemctl/systemd-analyze."""
import grp
import json
import os
import pwd
import stat

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout._server_unit import HEADER
from ansible_collections.gpufleet.sglang.plugins.modules import server_unit
from ansible_collections.gpufleet.sglang.tests.doubles import lstat_tree

API_KEY = "sk-Zq9\"quote\\back"
HF_TOKEN = "hf_Xy7tokenvalue"

SYSTEMCTL = r"""#!/bin/sh
state="$FAKE_STATE"
echo "systemctl $*" >> "$state/calls"
case "$1" in
  is-active) if [ -e "$state/active" ]; then echo active; exit 0; else echo inactive; exit 3; fi ;;
  is-enabled) if [ -e "$state/enabled" ]; then echo enabled; exit 0; else echo disabled; exit 1; fi ;;
  enable) touch "$state/enabled" ;;
  start|restart) touch "$state/active" ;;
  stop) rm -f "$state/active" ;;
  daemon-reload) ;;
  show) if [ -e "$state/active" ]; then cat "$state/pid" 2>/dev/null || echo 4242; else echo 0; fi ;;
  *) echo "unknown $1" >&2; exit 1 ;;
esac
exit 0
"""

ANALYZE = r"""#!/bin/sh
state="$FAKE_STATE"
echo "systemd-analyze $*" >> "$state/calls"
# the unit must exist when it is verified
[ -f "$2" ] || { echo "missing $2" >&2; exit 1; }
cp "$2" "$state/verified.service"
if [ -e "$state/verify_fails" ]; then
  echo "$2:12: Unknown key name 'Bogus' in section 'Service'" >&2
  exit 1
fi
exit 0
"""


class Host(object):
    """A temporary root: /etc/systemd/system, /etc/sglang, facts dir, fake binaries."""

    def __init__(self, tmp_path, monkeypatch):
        self.root = tmp_path / "root"
        self.state = tmp_path / "state"
        self.bin = tmp_path / "bin"
        for path in (self.root, self.state, self.bin):
            path.mkdir()
        (self.root / "etc" / "systemd" / "system").mkdir(parents=True)
        for name, body in (("systemctl", SYSTEMCTL), ("systemd-analyze", ANALYZE)):
            path = self.bin / name
            path.write_text(body)
            path.chmod(0o755)
        monkeypatch.setenv("PATH", "%s:%s" % (self.bin, os.environ["PATH"]))
        monkeypatch.setenv("FAKE_STATE", str(self.state))
        # root-owned files need root; a non-root test run owns them itself
        me = pwd.getpwuid(os.geteuid()).pw_name
        mygroup = grp.getgrgid(os.getegid()).gr_name
        monkeypatch.setattr(server_unit, "ROOT_OWNER", me)
        monkeypatch.setattr(server_unit, "ROOT_GROUP", mygroup)
        self.user, self.group = me, mygroup
        self.unit = self.root / "etc" / "systemd" / "system" / "sglang.service"
        self.config = self.root / "etc" / "sglang"
        self.env = self.config / "sglang.env"
        self.last_good = self.config / "last-good"
        self.staging = self.config / "staging"
        self.record = self.root / "etc" / "ansible" / "facts.d" / "sglang.fact"
        self.home = self.root / "var" / "lib" / "sglang"
        # the launcher the server role installs when the server has an API key
        self.secret_exec = self.root / "usr" / "local" / "libexec" / "gpufleet-sglang" / "secret_exec.py"
        self.secret_exec.parent.mkdir(parents=True)
        self.secret_exec.write_text("# the launcher\n")

    def args(self, **over):
        args = dict(
            python="/opt/sglang/0.5.9/bin/python",
            argv=["--model-path", "/models/kimi-k2", "--tp-size", "8", "--host", "0.0.0.0",
                  "--port", "30000"],
            api_key=API_KEY,
            secret_exec=str(self.secret_exec),
            hf_token=HF_TOKEN,
            environment={"NCCL_DEBUG": "WARN"},
            user=self.user,
            group=self.group,
            device_groups=["video"],
            home=str(self.home),
            config_dir=str(self.config),
            unit_dir=str(self.unit.parent),
            record_path=str(self.record),
            strategy="tp8",
            layout={"tp": 8, "pp": 1, "ep": 1, "dp": 1, "name": "tp8"},
            release="0.5.9",
            port=30000,
            manage_account=False,
        )
        args.update(over)
        return args

    def calls(self):
        path = self.state / "calls"
        return path.read_text().splitlines() if path.exists() else []

    def reset_calls(self):
        path = self.state / "calls"
        if path.exists():
            path.unlink()

    def tree(self):
        """Every path under the root with its mtime, mode and content (files)."""
        out = {}
        for path, st in lstat_tree(self.root):
            content = None
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as handle:
                    content = handle.read()
            out[os.path.relpath(path, str(self.root))] = (st.st_mtime_ns, stat.S_IMODE(st.st_mode), content)
        return out


@pytest.fixture
def host(tmp_path, monkeypatch):
    return Host(tmp_path, monkeypatch)


def mode(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


def test_first_install(run_module, host):
    result, failed = run_module(server_unit, host.args())
    assert not failed, result
    assert result["changed"] is True and result["restart"] is True
    assert result["unit_changed"] is True and result["env_changed"] is True
    assert result["has_last_good"] is False
    assert result["started"] is False  # the caller's handler (re)starts a changed server
    assert result["unit_path"] == str(host.unit) and result["env_path"] == str(host.env)
    unit = host.unit.read_text()
    env = host.env.read_text()
    assert unit.startswith(HEADER + "\n")
    assert "bin/python %s --api-key=SGLANG_API_KEY -- -m sglang.launch_server" % host.secret_exec in unit
    assert HF_TOKEN not in unit and "Zq9" not in unit
    assert 'SGLANG_API_KEY="sk-Zq9\\"quote\\\\back"' in env
    assert "EnvironmentFile=%s/sglang.env" % host.config in unit
    import hashlib
    assert result["unit_sha1"] == hashlib.sha1(unit.encode()).hexdigest()
    # modes
    assert mode(host.unit) == 0o644 and mode(host.env) == 0o600 and mode(host.record) == 0o644
    assert mode(host.home) == 0o750
    for path in (host.config, host.staging, host.last_good):
        assert mode(path) == 0o700
    assert mode(host.record.parent) == 0o755
    # staged copies, verified, last-good empty
    assert (host.staging / "sglang.service").read_text() == unit
    assert (host.staging / "sglang.env").read_text() == env
    assert mode(host.staging / "sglang.env") == 0o600
    assert os.listdir(str(host.last_good)) == []
    assert (host.state / "verified.service").read_text() == unit
    # record
    rec = json.loads(host.record.read_text())
    assert rec == result["record"]
    assert set(rec) == {"strategy", "layout", "release", "argv", "unit_sha1", "env_sha1", "service", "port",
                        "deployed_at", "run_sha256", "run_spec_version", "pending", "pending_pid",
                        "restart_owed_pid"}
    assert len(rec["run_sha256"]) == 64 and rec["pending"] == [] and rec["pending_pid"] is None
    assert rec["unit_sha1"] == result["unit_sha1"] and rec["port"] == 30000 and rec["strategy"] == "tp8"
    assert rec["env_sha1"] == hashlib.sha1(env.encode()).hexdigest()
    calls = host.calls()
    assert "systemd-analyze verify %s" % (host.staging / "sglang.service") in calls
    assert "systemctl daemon-reload" in calls
    assert "systemctl enable sglang.service" in calls
    assert not [c for c in calls if c.startswith(("systemctl restart", "systemctl start"))]
    assert result["enabled"] is True and result["active"] is False
    # no leftovers of the atomic writes
    assert not [n for n in os.listdir(str(host.unit.parent)) if n.startswith(".")]
    assert not [n for n in os.listdir(str(host.config)) if n.startswith(".")]


def test_rerun_is_a_no_op(run_module, host):
    run_module(server_unit, host.args())
    (host.state / "active").touch()
    before = host.tree()
    host.reset_calls()
    result, failed = run_module(server_unit, host.args())
    assert not failed, result
    assert result["changed"] is False and result["restart"] is False and result["started"] is False
    assert result["unit_changed"] is False and result["env_changed"] is False
    assert result["record_changed"] is False
    assert result["has_last_good"] is True and result["active"] is True
    assert host.tree() == before  # zero writes: same mtimes, modes and contents
    calls = host.calls()
    assert not [c for c in calls if not c.startswith(("systemctl is-active", "systemctl is-enabled",
                                                      "systemctl show --property=MainPID"))], calls
    assert result["record"] == json.loads(host.record.read_text())


def test_changed_argv_keeps_last_good(run_module, host):
    first, dummy = run_module(server_unit, host.args())
    old_unit, old_env, old_record = host.unit.read_bytes(), host.env.read_bytes(), host.record.read_bytes()
    (host.state / "active").touch()
    host.reset_calls()
    result, failed = run_module(server_unit, host.args(argv=["--model-path", "/models/kimi-k2", "--tp-size",
                                                             "8", "--port", "30000", "--enable-metrics"]))
    assert not failed, result
    assert result["changed"] is True and result["restart"] is True
    assert result["unit_changed"] is True and result["env_changed"] is False
    assert result["has_last_good"] is True
    assert (host.last_good / "sglang.service").read_bytes() == old_unit
    assert (host.last_good / "sglang.env").read_bytes() == old_env
    assert (host.last_good / "sglang.fact").read_bytes() == old_record
    assert mode(host.last_good / "sglang.env") == 0o600
    assert "--enable-metrics" in host.unit.read_text()
    assert result["unit_sha1"] != first["unit_sha1"]
    assert json.loads(host.record.read_text())["unit_sha1"] == result["unit_sha1"]
    calls = host.calls()
    assert "systemctl daemon-reload" in calls
    assert not [c for c in calls if c.startswith(("systemctl restart", "systemctl start"))]


def test_changed_secret_only_changes_env(run_module, host):
    run_module(server_unit, host.args())
    result, failed = run_module(server_unit, host.args(api_key="another-key"))
    assert not failed
    assert result["restart"] is True and result["unit_changed"] is False and result["env_changed"] is True


def test_verify_failure_installs_nothing(run_module, host):
    run_module(server_unit, host.args())
    old = host.unit.read_bytes(), host.env.read_bytes(), host.record.read_bytes()
    (host.state / "verify_fails").touch()
    host.reset_calls()
    result, failed = run_module(server_unit, host.args(argv=["--model-path", "/other"]))
    assert failed
    assert "systemd-analyze verify refused" in result["msg"] and "Unknown key name 'Bogus'" in result["msg"]
    assert result["rc"] == 1 and "Bogus" in result["stderr"]
    assert (host.unit.read_bytes(), host.env.read_bytes(), host.record.read_bytes()) == old
    assert os.listdir(str(host.last_good)) == []
    # only the read-only query of the main PID ran
    assert [c for c in host.calls() if c.startswith("systemctl")] == [
        "systemctl show --property=MainPID --value sglang.service"]


def test_verify_failure_on_first_install(run_module, host):
    (host.state / "verify_fails").touch()
    result, failed = run_module(server_unit, host.args())
    assert failed
    assert not host.unit.exists() and not host.env.exists() and not host.record.exists()


def test_verify_can_be_skipped(run_module, host):
    (host.state / "verify_fails").touch()
    result, failed = run_module(server_unit, host.args(verify=False))
    assert not failed and host.unit.exists()
    assert not [c for c in host.calls() if c.startswith("systemd-analyze")]


def test_check_mode_writes_nothing(run_module, host):
    before = host.tree()
    result, failed = run_module(server_unit, host.args(_ansible_check_mode=True, _ansible_diff=True))
    assert not failed, result
    assert result["changed"] is True and result["restart"] is True
    assert host.tree() == before
    assert not host.config.exists() and not host.record.exists() and not host.home.exists()
    calls = host.calls()
    # verify ran on a private copy, which is gone again
    verify = [c for c in calls if c.startswith("systemd-analyze verify")]
    assert len(verify) == 1 and str(host.root) not in verify[0]
    assert not os.path.exists(verify[0].split()[-1])
    assert not [c for c in calls if c.split()[1] not in ("is-active", "is-enabled", "verify", "show")]
    assert result["diff"][0]["before"] == "" and "ExecStart=" in result["diff"][0]["after"]


def test_check_mode_after_install(run_module, host):
    run_module(server_unit, host.args())
    (host.state / "active").touch()
    before = host.tree()
    result, dummy = run_module(server_unit, host.args(release="0.5.10", _ansible_check_mode=True))
    assert result["changed"] is True and result["restart"] is True and result["unit_changed"] is True
    assert result["record"]["release"] == "0.5.10"
    assert host.tree() == before
    result, dummy = run_module(server_unit, host.args(_ansible_check_mode=True))
    assert result["changed"] is False and result["restart"] is False


def test_diff_masks_env_values(run_module, host):
    run_module(server_unit, host.args())
    result, failed = run_module(server_unit, host.args(
        api_key="new-secret-value", environment={"NCCL_DEBUG": "INFO", "EXTRA": "visible?"},
        _ansible_diff=True))
    assert not failed
    unit_diff, env_diff = result["diff"]
    assert unit_diff["before"] == unit_diff["after"]  # the key is a reference in the unit
    text = json.dumps(env_diff)
    for secret in ("new-secret-value", "Zq9", HF_TOKEN, "INFO", "WARN", "visible?"):
        assert secret not in text
    assert "SGLANG_API_KEY=***" in env_diff["after"] and "EXTRA=***" in env_diff["after"]
    assert "HF_TOKEN=***" in env_diff["before"] and "EXTRA" not in env_diff["before"]


def test_stopped_server_with_unchanged_files_is_started(run_module, host):
    run_module(server_unit, host.args())
    host.reset_calls()
    result, failed = run_module(server_unit, host.args())
    assert not failed
    assert result["changed"] is True and result["started"] is True and result["restart"] is False
    assert result["active"] is True
    calls = host.calls()
    assert "systemctl start sglang.service" in calls
    assert not [c for c in calls if c.startswith("systemctl restart")]
    # start: false leaves it stopped
    (host.state / "active").unlink()
    result, dummy = run_module(server_unit, host.args(start=False))
    assert result["changed"] is False and result["started"] is False and result["active"] is False


def test_stopped_server_in_check_mode_is_not_started(run_module, host):
    run_module(server_unit, host.args())
    host.reset_calls()
    result, dummy = run_module(server_unit, host.args(_ansible_check_mode=True))
    assert result["changed"] is True and result["started"] is True
    assert "systemctl start sglang.service" not in host.calls()


def test_rolled_back_restores(run_module, host):
    run_module(server_unit, host.args())
    old = host.unit.read_bytes(), host.env.read_bytes(), host.record.read_bytes()
    run_module(server_unit, host.args(release="0.5.10", python="/opt/sglang/0.5.10/bin/python"))
    assert host.unit.read_bytes() != old[0]
    host.reset_calls()
    result, failed = run_module(server_unit, {
        "state": "rolled_back", "config_dir": str(host.config), "unit_dir": str(host.unit.parent),
        "record_path": str(host.record)})
    assert not failed, result
    assert result["changed"] is True and result["restarted"] is True
    assert (host.unit.read_bytes(), host.env.read_bytes(), host.record.read_bytes()) == old
    assert mode(host.env) == 0o600 and mode(host.unit) == 0o644
    assert result["restored"] == json.loads(old[2]) and result["restored"]["release"] == "0.5.9"
    assert result["record"] == result["restored"]
    calls = host.calls()
    assert calls.index("systemctl daemon-reload") < calls.index("systemctl restart sglang.service")
    assert result["active"] is True


def test_rolled_back_check_mode_does_nothing(run_module, host):
    run_module(server_unit, host.args())
    run_module(server_unit, host.args(release="0.5.10"))
    before = host.tree()
    host.reset_calls()
    result, failed = run_module(server_unit, {
        "state": "rolled_back", "config_dir": str(host.config), "unit_dir": str(host.unit.parent),
        "record_path": str(host.record), "_ansible_check_mode": True})
    assert not failed and result["changed"] is True and result["restored"]["release"] == "0.5.9"
    assert host.tree() == before
    assert not [c for c in host.calls() if c.split()[1] in ("daemon-reload", "restart")]


def test_rolled_back_without_last_good_fails(run_module, host):
    run_module(server_unit, host.args())
    result, failed = run_module(server_unit, {
        "state": "rolled_back", "config_dir": str(host.config), "unit_dir": str(host.unit.parent),
        "record_path": str(host.record)})
    assert failed and "no last known good configuration" in result["msg"]
    assert not [c for c in host.calls() if c.startswith("systemctl restart")]


def test_record_only_change_does_not_restart(run_module, host):
    first, dummy = run_module(server_unit, host.args())
    (host.state / "active").touch()
    result, dummy = run_module(server_unit, host.args(port=31000))
    assert result["changed"] is True and result["restart"] is False and result["record_changed"] is True
    rec = json.loads(host.record.read_text())
    assert rec["port"] == 31000 and rec["deployed_at"] == first["record"]["deployed_at"]


def test_secrets_do_not_leak_into_the_result(run_module, host):
    result, failed = run_module(server_unit, host.args(_ansible_diff=True))
    assert not failed
    text = json.dumps(result)
    assert HF_TOKEN not in text and "Zq9" not in text


def test_a_key_without_the_launcher_is_refused_before_anything_changes(run_module, host):
    host.secret_exec.unlink()
    result, failed = run_module(server_unit, host.args())
    assert failed and result["msg"] == (
        "server_api_key is set but the launcher %s is not installed (the server role's "
        "prepare step installs it)" % host.secret_exec)
    assert not host.unit.exists() and not host.env.exists()
    result, failed = run_module(server_unit, host.args(api_key=""))
    assert not failed and host.unit.exists() and "secret_exec" not in host.unit.read_text()


@pytest.mark.parametrize("over, msg", [
    ({"python": None}, "python"),
    ({"argv": []}, "argv must not be empty"),
    ({"service_name": "sglang.service"}, "service_name"),
    ({"layout": {"tp": 8}}, "layout lacks"),
])
def test_bad_input(run_module, host, over, msg):
    args = host.args(**over)
    args = {k: v for k, v in args.items() if v is not None}
    result, failed = run_module(server_unit, args)
    assert failed and msg in result["msg"]


ACCOUNT_TOOL = """#!/bin/sh
echo "$(basename "$0") $*" >> "$FAKE_STATE/calls"
exit 0
"""


def test_a_missing_account_is_created_and_an_existing_one_left_alone(host, run_module):
    for name in ("groupadd", "useradd", "usermod"):
        path = host.bin / name
        path.write_text(ACCOUNT_TOOL)
        path.chmod(0o755)
    # a user and groups this machine does not have: created with the system tools
    result, failed = run_module(server_unit, host.args(
        manage_account=True, user="gpufleet-no-such-user", group="gpufleet-no-such-group",
        device_groups=["gpufleet-no-such-video"], _ansible_check_mode=True))
    assert not failed, result
    assert result["account_changed"] is True
    assert not [c for c in host.calls() if c.split()[0] in ("groupadd", "useradd", "usermod")], \
        "check mode runs no account tool"
    # the current user, its own group and no device group: nothing to do, no tool runs
    result, failed = run_module(server_unit, host.args(
        manage_account=True, device_groups=[], home=pwd.getpwuid(os.geteuid()).pw_dir))
    assert not failed, result
    account_calls = [c for c in host.calls() if c.split()[0] in ("groupadd", "useradd", "usermod")]
    if pwd.getpwuid(os.geteuid()).pw_shell == "/usr/sbin/nologin":
        assert account_calls == [] and result["account_changed"] is False
    else:
        assert account_calls == ["usermod --shell /usr/sbin/nologin %s" % host.user]


def test_a_reload_only_change_is_in_effect_after_the_daemon_reload(run_module, host):
    """Issue 47: a changed RestartSec= is installed, systemd reloaded, nothing restarted and
    nothing pending; the summary says the daemon-reload of this run put it in effect (it
    used to say "takes effect at the next restart")."""
    run_module(server_unit, host.args())
    (host.state / "active").touch()
    (host.state / "pid").write_text("777\n")
    host.reset_calls()
    result, failed = run_module(server_unit, host.args(restart_sec=30))
    assert not failed, result
    assert result["changed"] is True and result["restart"] is False and result["action"] == "reload"
    assert result["reload"] == ["Service.RestartSec"] and result["pending"] == []
    assert result["summary"] == ("installed, takes effect at the daemon-reload of this run, no restart: "
                                 "Service.RestartSec")
    assert "RestartSec=30" in host.unit.read_text()
    calls = host.calls()
    assert "systemctl daemon-reload" in calls and not [c for c in calls if c.split()[1] == "restart"]
    on_disk = json.loads(host.record.read_text())
    assert on_disk["pending"] == [] and on_disk["pending_pid"] is None


def test_a_sandboxing_change_is_pending_until_applied(run_module, host):
    """Issue 23 in the module: a unit installed by a release without PrivateMounts= (and a
    record without run_sha256) is upgraded in place; apply_pending restarts it."""
    run_module(server_unit, host.args())
    host.unit.write_text(host.unit.read_text().replace("PrivateMounts=yes\n", ""))
    rec = json.loads(host.record.read_text())
    for key in ("run_sha256", "run_spec_version", "pending", "pending_pid"):
        del rec[key]
    host.record.write_text(json.dumps(rec))
    (host.state / "active").touch()
    (host.state / "pid").write_text("777\n")
    host.reset_calls()
    result, failed = run_module(server_unit, host.args())
    assert not failed, result
    assert result["changed"] is True and result["restart"] is False and result["byte_rule_restart"] is True
    assert result["action"] == "pending" and result["pending"] == ["Service.PrivateMounts"]
    assert result["previous_from"] == "files"
    assert result["summary"] == "pending: applies at the next restart: Service.PrivateMounts"
    assert "PrivateMounts=yes" in host.unit.read_text()
    on_disk = json.loads(host.record.read_text())
    assert on_disk["pending"] == ["Service.PrivateMounts"] and on_disk["pending_pid"] == 777
    assert "systemctl daemon-reload" in host.calls()

    # a re-run changes nothing and keeps it pending
    before = host.tree()
    again, failed = run_module(server_unit, host.args())
    assert not failed and again["changed"] is False and again["pending"] == ["Service.PrivateMounts"]
    assert host.tree() == before

    # the switch: a restart, no file but the record written
    host.reset_calls()
    applied, failed = run_module(server_unit, host.args(apply_pending=True))
    assert not failed, applied
    assert applied["changed"] is True and applied["restart"] is True and applied["action"] == "apply_pending"
    assert applied["applied"] == ["Service.PrivateMounts"] and applied["pending"] == []
    assert applied["unit_changed"] is False and applied["env_changed"] is False
    assert json.loads(host.record.read_text())["pending"] == []
    assert "systemctl daemon-reload" not in host.calls()
