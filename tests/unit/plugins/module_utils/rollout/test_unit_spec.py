"""The restart decision of issue 23: restart on what runs, not on the unit's bytes.

Every case renders a unit and an environment file with the module's own renderer (the
"installed" pair), changes one thing, and asks :func:`_server_unit.plan`. Each field of
what runs must restart; a comment, a reordering, an added sandboxing option must not.
"""
import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout import (
    _server_unit,
    _unit_spec)
from ansible_collections.gpufleet.sglang.plugins.module_utils.status import _status
from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout._server_unit import (
    pending_now,
    plan,
    record,
    render_env,
    render_unit,
    summary,
)
from ansible_collections.gpufleet.sglang.tests.unit_params import server_unit_params

ENV_PATH = "/etc/sglang/sglang.env"
PID = 4242


def params(**over):
    """The shared unit parameters with an API key and one environment variable."""
    return server_unit_params(**dict({"api_key": "secret", "environment": {"NCCL_DEBUG": "WARN"}},
                                     **over))


def files(p):
    return render_unit(p).encode(), render_env(p).encode()


def installed_record(p, decision=None):
    unit, env = files(p)
    return record(None, p, _server_unit._sha1(unit), "2026-12-01T00:00:00Z", True,
                  env_sha1=_server_unit._sha1(env), decision=decision)


def decide_between(old_unit, old_env, new_unit, new_env, rec=None, main_pid=PID, apply_pending=False,
                   release="0.5.9"):
    return plan(old_unit, old_env, new_unit, new_env, ENV_PATH, release, rec, main_pid, apply_pending)


def decide_params(old, new, **kw):
    old_unit, old_env = files(old)
    new_unit, new_env = files(new)
    kw.setdefault("rec", {"release": old["release"]})
    return decide_between(old_unit, old_env, new_unit, new_env, release=new["release"], **kw)


# ------------------------------------------------------------------ what must restart
RESTARTS = {
    "argv": dict(argv=["--model-path", "/models/kimi-k2", "--tp-size", "8", "--ep-size", "8",
                       "--host", "0.0.0.0", "--port", "30000", "--enable-metrics"]),
    "argv order": dict(argv=["--tp-size", "8", "--model-path", "/models/kimi-k2", "--ep-size", "8",
                             "--host", "0.0.0.0", "--port", "30000"]),
    "model path": dict(argv=["--model-path", "/models/kimi-k2.5", "--tp-size", "8", "--ep-size", "8",
                             "--host", "0.0.0.0", "--port", "30000"]),
    "venv and release": dict(python="/opt/sglang/0.5.23/bin/python", release="0.5.23"),
    "release alone": dict(release="0.5.10"),
    "environment value": dict(environment={"NCCL_DEBUG": "INFO"}),
    "environment added": dict(environment={"NCCL_DEBUG": "WARN", "NCCL_IB_DISABLE": "1"}),
    "secret": dict(api_key="another"),
    "pp layer partition": dict(pp_layer_partition="30,31"),
    "user": dict(user="sglang2"),
    "group": dict(group="gpu"),
    "device access": dict(device_groups=["video", "render"]),
    "working directory": dict(home="/srv/sglang"),
    "environment file": dict(config_dir="/etc/sglang-b"),
}

FIELD = {
    "argv": "argv", "argv order": "argv", "model path": "model_path", "venv and release": "venv",
    "release alone": "release", "environment value": "environment", "environment added": "environment",
    "secret": "environment", "pp layer partition": "environment", "user": "user", "group": "group",
    "device access": "supplementary_groups", "working directory": "working_directory",
    "environment file": "environment_files",
}


@pytest.mark.parametrize("name", sorted(RESTARTS))
def test_a_change_of_what_runs_restarts(name):
    result = decide_params(params(), params(**RESTARTS[name]))
    assert result["restart"] is True and result["action"] == "restart"
    assert FIELD[name] in result["run_changes"], result["run_changes"]
    assert summary(result).startswith("restart: ")


def _edit(unit, old, new):
    text = unit.decode()
    assert old in text
    return text.replace(old, new).encode()


@pytest.mark.parametrize("old,new,field", [
    ("LimitNOFILE=65536", "LimitNOFILE=1048576", "limits"),
    ("LimitMEMLOCK=infinity\n", "LimitMEMLOCK=infinity\nLimitCORE=0\n", "limits"),
    ("SupplementaryGroups=video\n", "SupplementaryGroups=video\nDevicePolicy=closed\nDeviceAllow=/dev/nvidia0 rw\n",
     "device_access"),
    ("Type=simple", "Type=notify", "type"),
    ("Group=sglang\n", "Group=sglang\nEnvironment=CUDA_VISIBLE_DEVICES=0,1\n", "environment"),
    ("KillMode=control-group\n", "KillMode=control-group\nNice=5\n", "other"),
])
def test_limits_devices_and_unknown_directives_restart(old, new, field):
    unit, env = files(params())
    result = decide_between(unit, env, _edit(unit, old, new), env, rec={"release": "0.5.9"})
    assert result["restart"] is True and field in result["run_changes"]


# ------------------------------------------------------------------ what must not
def test_the_same_files_do_nothing():
    unit, env = files(params())
    result = decide_between(unit, env, unit, env, rec={"release": "0.5.9"})
    assert result["restart"] is False and result["install"] is False and result["action"] == "none"
    assert result["byte_rule_restart"] is False


def test_a_comment_change_installs_without_a_restart():
    unit, env = files(params())
    new_unit = _edit(unit, _server_unit.HEADER, "# Managed by gpufleet.sglang 0.2.0; another comment")
    new_env = b"# a comment\n" + env
    result = decide_between(unit, env, new_unit, new_env, rec={"release": "0.5.9"})
    # the byte rule (before 0.2.0) would have restarted
    assert result["byte_rule_restart"] is True and result["install"] is True
    assert result["restart"] is False and result["action"] == "comments"
    assert result["run_changes"] == [] and result["reload"] == [] and result["pending"] == []
    assert summary(result) == "installed, comments only"


def test_a_reordering_does_not_restart():
    unit, env = files(params())
    lines = unit.decode().splitlines(True)
    start = lines.index("Type=simple\n")
    # User/Group/... before Type, and the sandboxing block reversed
    service = lines[start:start + 5]
    reordered = lines[:start] + service[1:] + service[:1] + lines[start + 5:]
    first, last = reordered.index("NoNewPrivileges=yes\n"), reordered.index("UMask=0027\n")
    reordered[first:last + 1] = reversed(reordered[first:last + 1])
    env_lines = env.decode().splitlines(True)
    new_env = "".join(env_lines[:2] + list(reversed(env_lines[2:]))).encode()
    result = decide_between(unit, env, "".join(reordered).encode(), new_env, rec={"release": "0.5.9"})
    assert result["byte_rule_restart"] is True
    assert result["restart"] is False and result["run_changes"] == [] and result["pending"] == []


def without_private_mounts(unit):
    return _edit(unit, "PrivateMounts=yes\n", "")


def test_an_added_sandboxing_option_is_pending():
    new_unit, env = files(params())
    unit = without_private_mounts(new_unit)
    new_unit = _edit(new_unit, "PrivateTmp=yes\n", "PrivateTmp=yes\nProtectKernelModules=yes\n")
    result = decide_between(unit, env, new_unit, env, rec={"release": "0.5.9"})
    assert result["byte_rule_restart"] is True and result["install"] is True
    assert result["restart"] is False and result["action"] == "pending"
    # ProtectKernelModules was there already: only PrivateMounts changed
    assert result["pending"] == ["Service.PrivateMounts"] and result["pending_pid"] == PID
    assert summary(result) == "pending: applies at the next restart: Service.PrivateMounts"


@pytest.mark.parametrize("over,key", [
    (dict(restart_sec=30), "Service.RestartSec"),
    (dict(timeout_stop_sec=600), "Service.TimeoutStopSec"),
    (dict(start_limit_burst=5), "Unit.StartLimitBurst"),
    (dict(start_limit_interval_sec=60), "Unit.StartLimitIntervalSec"),
    (dict(strategy="tp8-ep8-renamed"), "Unit.Description"),
])
def test_a_reload_only_change_reloads_only(over, key):
    result = decide_params(params(), params(**over))
    assert result["restart"] is False and result["install"] is True and result["action"] == "reload"
    assert result["reload"] == [key] and result["pending"] == []
    assert summary(result) == "installed, takes effect at the daemon-reload of this run, no restart: %s" % key


def _status_of(p, unit, env, decision, main_pid=PID):
    """What playbooks/status.yml shows for the record the unit step writes after
    ``decision``, while ``main_pid`` still runs: the row's ``pending`` and its PENDING
    column (the 11th)."""
    rec = record(None, p, _server_unit._sha1(unit), "t", decision["restart"],
                 env_sha1=_server_unit._sha1(env), decision=decision)
    props = {"ActiveState": "active", "MainPID": str(main_pid), "ExecMainStartTimestampMonotonic": "1000000"}
    row = _status.row("h1", rec, props, 313000000, {"route": "/health", "ready": True, "detail": "200"},
                      {"detail": "ok"}, [], 30000, "sglang.service", "/etc/ansible/facts.d/sglang.fact")
    return row["pending"], _status.table_line(row).split()[10]


def test_a_reload_only_change_takes_effect_at_the_daemon_reload_not_the_next_restart():
    """Issue 47: systemd's manager reads a reload-only directive from the unit it loaded, so the
    step's daemon-reload puts it in effect: the report says so, nothing is pending and the
    status shows nothing pending. The control, a sandboxing option added in the same way,
    still waits for the next restart, and says so."""
    old, new = params(), params(restart_sec=30, strategy="tp8-ep8-renamed")
    result = decide_params(old, new)
    assert result["action"] == "reload" and result["restart"] is False
    assert result["reload"] == ["Service.RestartSec", "Unit.Description"] and result["pending"] == []
    assert summary(result) == ("installed, takes effect at the daemon-reload of this run, no restart: "
                               "Service.RestartSec, Unit.Description")
    assert "next restart" not in summary(result)
    unit, env = files(new)
    assert _status_of(new, unit, env, result) == ([], "-")

    # the control: a sandboxing option is installed and pending until the next restart
    unit, env = files(params())
    sandboxed = decide_between(without_private_mounts(unit), env, unit, env, rec={"release": "0.5.9"})
    assert sandboxed["action"] == "pending" and sandboxed["restart"] is False
    assert summary(sandboxed) == "pending: applies at the next restart: Service.PrivateMounts"
    assert _status_of(params(), unit, env, sandboxed) == (["Service.PrivateMounts"], "PrivateMounts")


def test_an_install_section_change_is_read_at_the_next_enable():
    """[Install] is read by systemctl enable only (the step enables a unit that is not
    enabled): its change is reload-only, but the report does not claim the daemon-reload
    applied it."""
    unit, env = files(params())
    new_unit = _edit(unit, "WantedBy=multi-user.target", "WantedBy=graphical.target")
    result = decide_between(unit, env, new_unit, env, rec={"release": "0.5.9"})
    assert result["action"] == "reload" and result["restart"] is False and result["pending"] == []
    assert result["reload"] == ["Install.WantedBy"]
    assert summary(result) == "installed, read at the next systemctl enable, no restart: Install.WantedBy"
    assert [_unit_spec.reload_effect(name) for name in ("Unit.Description", "Service.KillMode",
                                                        "Install.WantedBy")] == [
        "daemon-reload", "daemon-reload", "enable"]


def test_a_reload_only_and_a_run_change_restart():
    result = decide_params(params(), params(restart_sec=30, user="other"))
    assert result["restart"] is True and result["run_changes"] == ["user"]
    assert result["reload"] == ["Service.RestartSec"]


def test_a_first_install_restarts():
    unit, env = files(params())
    result = decide_between(None, None, unit, env, main_pid=None)
    assert result["restart"] is True and result["action"] == "install" and result["previous_from"] is None


# ------------------------------------------------------------------ pending, apply_pending
def _pending_state():
    old = params()
    new_unit, env = files(old)
    unit = without_private_mounts(new_unit)
    first = decide_between(unit, env, new_unit, env, rec={"release": "0.5.9"})
    assert first["pending"] == ["Service.PrivateMounts"]
    rec = record(None, old, _server_unit._sha1(new_unit), "t", False, env_sha1=_server_unit._sha1(env),
                 decision=first)
    return new_unit, env, rec


def test_pending_stays_while_the_same_process_runs():
    unit, env, rec = _pending_state()
    again = decide_between(unit, env, unit, env, rec=rec)
    assert again["install"] is False and again["restart"] is False and again["action"] == "pending"
    assert again["pending"] == ["Service.PrivateMounts"] and again["previous_from"] == "record"


def test_pending_is_applied_by_any_restart():
    unit, env, rec = _pending_state()
    for pid in (PID + 1, None):
        result = decide_between(unit, env, unit, env, rec=rec, main_pid=pid)
        assert result["pending"] == [] and result["restart"] is False and result["action"] == "none"
    assert pending_now(rec, PID) == ["Service.PrivateMounts"] and pending_now(rec, PID + 1) == []


def test_apply_pending_restarts_what_is_pending_and_nothing_else():
    unit, env, rec = _pending_state()
    result = decide_between(unit, env, unit, env, rec=rec, apply_pending=True)
    assert result["restart"] is True and result["action"] == "apply_pending" and result["install"] is False
    assert result["applied"] == ["Service.PrivateMounts"] and result["pending"] == []
    assert summary(result) == "restart to apply pending: Service.PrivateMounts"
    # the control: with nothing pending, the switch restarts nothing
    unit, env = files(params())
    calm = decide_between(unit, env, unit, env, rec={"release": "0.5.9"}, apply_pending=True)
    assert calm["restart"] is False and calm["action"] == "none"


# ------------------------------------------------------------------ a restart owed
def test_a_restart_the_controller_never_made_is_owed_while_the_old_process_runs():
    """Issue 22's after_unit kill point: the new unit is installed and recorded, then the
    controller dies before the handler restarts the server. The re-run finds the installed
    files equal to the new ones; the record's restart_owed_pid (the process the restart
    was to replace) still runs, so it restarts, once."""
    old, new = params(), params(argv=["--model-path", "/models/x", "--tp-size", "8", "--ep-size", "8"])
    old_unit, env = files(old)
    new_unit, new_env = files(new)
    switch = decide_between(old_unit, env, new_unit, new_env, rec={"release": "0.5.9"})
    assert switch["restart"] is True and switch["restart_owed_pid"] == PID
    rec = record(None, new, _server_unit._sha1(new_unit), "t", True,
                 env_sha1=_server_unit._sha1(new_env), decision=switch)
    assert rec["restart_owed_pid"] == PID
    # killed before the restart: the same PID runs the old server
    again = decide_between(new_unit, new_env, new_unit, new_env, rec=rec, main_pid=PID)
    assert again["restart"] is True and again["action"] == "restart" and again["install"] is False
    assert again["run_changes"] == ["restart owed since the last install (main PID %d still runs)" % PID]
    # the control: once the restart happened (another PID), or nothing runs, nothing is owed,
    # and the record stays as it was (a no-op writes the same record)
    for pid in (PID + 1, None):
        calm = decide_between(new_unit, new_env, new_unit, new_env, rec=rec, main_pid=pid)
        assert calm["restart"] is False and calm["action"] == "none"
        assert calm["restart_owed_pid"] == PID
        assert record(rec, new, _server_unit._sha1(new_unit), "t2", False,
                      env_sha1=_server_unit._sha1(new_env), decision=calm) == rec


# ------------------------------------------------------------------ the record's digest
def test_the_records_digest_is_used_when_it_describes_the_files():
    p = params()
    unit, env = files(p)
    rec = installed_record(p, decision={"run_sha256": "0" * 64})
    # the record says something else runs (the files were installed, not yet restarted)
    result = decide_between(unit, env, unit, env, rec=rec)
    assert result["previous_from"] == "record" and result["restart"] is True
    assert result["run_changes"] == ["recorded run spec"]


def test_a_record_without_the_digest_is_read_from_the_files():
    """A record of 0.1.0 has no run_sha256: the installed files are parsed."""
    p = params()
    unit, env = files(p)
    old_record = {"release": "0.5.9", "unit_sha1": _server_unit._sha1(unit), "argv": p["argv"]}
    result = decide_between(unit, env, unit, env, rec=old_record)
    assert result["previous_from"] == "files" and result["restart"] is False
    # the release of what runs comes from the record: another one restarts
    assert decide_between(unit, env, unit, env, rec=dict(old_record, release="0.5.8"))["restart"] is True


def test_a_record_of_edited_files_is_not_trusted():
    p = params()
    unit, env = files(p)
    rec = installed_record(p, decision={"run_sha256": "0" * 64})
    edited = unit + b"# a local edit\n"
    result = decide_between(edited, env, unit, env, rec=rec)
    assert result["previous_from"] == "files" and result["restart"] is False


def test_the_digest_ignores_comments_and_order_but_not_values():
    p = params()
    unit, env = files(p)
    spec = _unit_spec.run_spec(unit, {ENV_PATH: env}, "0.5.9")
    commented = b"# x\n" + unit.replace(b"User=sglang\n", b"; y\nUser=sglang\n")
    assert _unit_spec.digest(_unit_spec.run_spec(commented, {ENV_PATH: env}, "0.5.9")) == _unit_spec.digest(spec)
    assert _unit_spec.digest(_unit_spec.run_spec(unit, {ENV_PATH: env}, "0.5.10")) != _unit_spec.digest(spec)


# ------------------------------------------------------------------ parsing
def test_the_run_spec_reads_back_what_was_rendered():
    argv = ["--model-path", "/models/My Model", "--chat-template", '{"a": "$HOME 50%"}',
            "--served-model-name", "kimi", "--port", "30000"]
    p = params(argv=argv, environment={"B": 'x "y" \\z', "A": "1"}, device_groups=["video", "render"])
    unit, env = files(p)
    spec = _unit_spec.run_spec(unit, {ENV_PATH: env}, "0.5.9")
    # $ is kept escaped ($$: a literal), % is unescaped
    assert spec["argv"] == (["/opt/sglang/0.5.9/bin/python",
                             "/usr/local/libexec/gpufleet-sglang/secret_exec.py",
                             "--api-key=SGLANG_API_KEY", "--", "-m", "sglang.launch_server"]
                            + [a.replace("$", "$$") for a in argv])
    assert spec["environment"] == {"HOME": "/var/lib/sglang", "SGLANG_API_KEY": "secret",
                                   "A": "1", "B": 'x "y" \\z'}
    assert spec["user"] == "sglang" and spec["group"] == "sglang"
    assert spec["supplementary_groups"] == ["render", "video"]
    assert spec["limits"] == {"LimitNOFILE": "65536", "LimitMEMLOCK": "infinity"}
    assert spec["working_directory"] == "/var/lib/sglang"
    assert spec["venv"] == "/opt/sglang/0.5.9" and spec["model_path"] == "/models/My Model"
    assert spec["environment_files"] == [ENV_PATH] and spec["other"] == []


def test_every_rendered_directive_has_a_class():
    """No directive the collection renders falls to the unknown (restart) default."""
    seen = _unit_spec.parse_unit(files(params())[0])
    assert seen
    for section, key, dummy in seen:
        assert (section, key) in _unit_spec._CLASSES or key.startswith("Limit"), (section, key)


def test_split_words():
    assert _unit_spec.split_words('a "b c" d\\ e \'f g\' 100%% "q\\"x"') == ["a", "b c", "d e", "f g", "100%", 'q"x']
    assert _unit_spec.split_words("") == []


def test_parse_unit_continuations_and_comments():
    text = "[Service]\n# c\nExecStart=/bin/x \\\n    --a 1 \\\n# inner comment\n    --b\n; other\nUser=u\n"
    assert _unit_spec.parse_unit(text) == [("Service", "ExecStart", "/bin/x --a 1 --b"), ("Service", "User", "u")]


def test_the_upgrade_from_0_1_0_restarts_nothing():
    """0.1.0 rendered the unit without Documentation= and PrivateMounts=, and its record
    had no run_sha256: the first deploy of 0.2.0 installs both, restarts nothing, and names
    them."""
    p = params()
    unit, env = files(p)
    old_unit = _edit(without_private_mounts(unit), "Documentation=%s\n" % _server_unit.DOCUMENTATION_URL, "")
    old_record = dict(installed_record(p))
    for key in ("run_sha256", "run_spec_version", "pending", "pending_pid"):
        del old_record[key]
    old_record["unit_sha1"] = _server_unit._sha1(old_unit)
    result = decide_between(old_unit, env, unit, env, rec=old_record)
    assert result["byte_rule_restart"] is True  # what 0.1.0 would have done
    assert result["restart"] is False and result["previous_from"] == "files"
    assert result["pending"] == ["Service.PrivateMounts"] and result["reload"] == ["Unit.Documentation"]
    assert summary(result) == ("pending: applies at the next restart: Service.PrivateMounts; "
                               "installed, takes effect at the daemon-reload of this run, no restart: "
                               "Unit.Documentation")
