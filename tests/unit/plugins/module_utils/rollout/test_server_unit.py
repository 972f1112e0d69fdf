import datetime
import hashlib
import json
import re

import jinja2
import pytest

from ansible_collections.gpufleet.sglang.plugins.filter.strategy import systemd_arg as filter_systemd_arg
from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout._server_unit import (
    HEADER,
    argv_lines,
    decide,
    mask_env,
    parse_record,
    port_of,
    RECORD_KEYS,
    record,
    record_text,
    render_env,
    render_unit,
    systemd_arg,
)
from ansible_collections.gpufleet.sglang.tests.unit_params import LAYOUT
from ansible_collections.gpufleet.sglang.tests.unit_params import server_unit_params as params


# The role's templates as they were when server_unit replaced them (frozen here, so the
# comparison keeps working once the role no longer ships them).
TEMPLATE_SOURCES = {
    "server.service.j2": r'''{{ ansible_managed | comment }}
@STRATEGY_LINE@
{% set ns = namespace(lines=[]) %}
{% for arg in server_flags.argv %}
{%   if arg is match('--') or ns.lines | length == 0 %}
{%     set ns.lines = ns.lines + [arg | gpufleet.sglang.systemd_arg] %}
{%   else %}
{%     set ns.lines = ns.lines[:-1] + [ns.lines[-1] ~ ' ' ~ (arg | gpufleet.sglang.systemd_arg)] %}
{%   endif %}
{% endfor %}
{% if server_api_key | length > 0 %}
{%   set ns.lines = ns.lines + ['--api-key ${SGLANG_API_KEY}'] %}
{% endif %}
[Unit]
Description=SGLang server ({{ server_layout.name }}, SGLang {{ server_flags.version }})
After=network-online.target
Wants=network-online.target
StartLimitIntervalSec={{ server_start_limit_interval_sec }}
StartLimitBurst={{ server_start_limit_burst }}

[Service]
Type=simple
User={{ server_user }}
Group={{ server_group }}
SupplementaryGroups={{ server_device_groups | join(' ') }}
WorkingDirectory={{ server_home }}
EnvironmentFile={{ server_config_dir }}/{{ server_service_name }}.env
ExecStart={{ server_python | gpufleet.sglang.systemd_arg }} -m sglang.launch_server \
{% for line in ns.lines %}
    {{ line }}{{ ' \\' if not loop.last else '' }}
{% endfor %}
Restart=on-failure
RestartSec={{ server_restart_sec }}
KillMode=control-group
TimeoutStopSec={{ server_timeout_stop_sec }}
LimitNOFILE=65536
LimitMEMLOCK=infinity
# Sandboxing that SGLang tolerates; docs/hardening.md lists what is left out and why
# (GPU device nodes, JIT compilers, NCCL sockets and /dev/shm must stay usable).
NoNewPrivileges=yes
CapabilityBoundingSet=
PrivateTmp=yes
ProtectSystem=strict
ReadWritePaths={{ server_home }}
ProtectHome=read-only
ProtectProc=invisible
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
RestrictNamespaces=yes
RestrictSUIDSGID=yes
RestrictRealtime=yes
LockPersonality=yes
SystemCallArchitectures=native
SystemCallFilter=~@clock @cpu-emulation @module @mount @obsolete @raw-io @reboot @swap
SystemCallErrorNumber=EPERM
RemoveIPC=yes
KeyringMode=private
UMask=0027

[Install]
WantedBy=multi-user.target
''',
    "server.env.j2": r'''# {{ ansible_managed }}
# Environment of {{ server_service_name }}.service. Mode 0600: it holds secrets.
HOME={{ server_home }}
{% if server_api_key | length > 0 %}
SGLANG_API_KEY="{{ server_api_key | replace('\\', '\\\\') | replace('"', '\\"') }}"
{% endif %}
{% if server_hf_token | length > 0 %}
HF_TOKEN="{{ server_hf_token | replace('\\', '\\\\') | replace('"', '\\"') }}"
{% endif %}
{% if server_pp_layer_partition | length > 0 %}
SGLANG_PP_LAYER_PARTITION={{ server_pp_layer_partition }}
{% endif %}
{% for name, value in server_environment | dictsort %}
{{ name }}="{{ value | string | replace('\\', '\\\\') | replace('"', '\\"') }}"
{% endfor %}
''',
}
# (that line is longer than the sanity tests allow in a source line)
TEMPLATE_SOURCES["server.service.j2"] = TEMPLATE_SOURCES["server.service.j2"].replace("@STRATEGY_LINE@", (
    "# Strategy {{ server_layout.name }} (tp {{ server_layout.tp }}, pp {{ server_layout.pp }},"
    " ep {{ server_layout.ep }}, dp {{ server_layout.dp }}) on SGLang {{ server_flags.version }}."))


def jinja_render(name, p):
    """Render a role template as the template module did (trim_blocks, trailing newline)."""
    source = TEMPLATE_SOURCES[name]
    # the header line is the only intended difference
    source = source.replace("{{ ansible_managed | comment }}", HEADER)
    source = source.replace("# {{ ansible_managed }}", HEADER)
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["gpufleet.sglang.systemd_arg"] = filter_systemd_arg
    env.tests["match"] = lambda value, pattern: re.match(pattern, value) is not None
    variables = {
        "server_layout": p["layout"],
        "server_flags": {"version": p["release"], "argv": p["argv"]},
        "server_api_key": p["api_key"],
        "server_hf_token": p["hf_token"],
        "server_environment": p["environment"],
        "server_pp_layer_partition": p["pp_layer_partition"],
        "server_user": p["user"],
        "server_group": p["group"],
        "server_device_groups": p["device_groups"],
        "server_home": p["home"],
        "server_config_dir": p["config_dir"],
        "server_service_name": p["service_name"],
        "server_python": p["python"],
        "server_restart_sec": p["restart_sec"],
        "server_start_limit_burst": p["start_limit_burst"],
        "server_start_limit_interval_sec": p["start_limit_interval_sec"],
        "server_timeout_stop_sec": p["timeout_stop_sec"],
    }
    return env.from_string(source).render(**variables)


CASES = {
    "plain": params(),
    "api key with quotes and backslashes": params(
        api_key='k"ey\\with$quotes%and\\"more', hf_token='hf_"tok\\en'),
    "value with spaces": params(argv=["--model-path", "/models/My Model", "--served-model-name",
                                      "Kimi K2.5", "--chat-template", "{\"a\": \"$HOME 50%\"}"]),
    "multi-value flags and switches": params(
        argv=["--model-path", "/m", "--trust-remote-code", "--cuda-graph-bs", "1", "2", "4", "8",
              "--enable-metrics", "--dist-init-addr", "10.0.0.1:50000", "--nnodes", "2"],
        device_groups=["video", "render"],
        environment={"NCCL_DEBUG": "WARN", "b_lower": 'x "y"', "A_FIRST": 1, "TRUE": True},
        pp_layer_partition="15,15,15,16",
        api_key="secret"),
    "first item not a flag": params(argv=["positional", "--port", "30001"], home="/srv/sglang home",
                                    python="/opt/venv with space/bin/python"),
    "no device groups": params(device_groups=[], service_name="sglang-b",
                               config_dir="/etc/sglang-b", restart_sec=5),
}


# Lines the unit gained after the templates were frozen (0.2.0: a reload-only
# Documentation= and a sandboxing option that changes nothing the server does, issue 23).
ADDED_SINCE_TEMPLATES = (
    "Documentation=https://example.invalid/gpufleet/sglang/blob/main/docs/hardening.md",
    "PrivateMounts=yes",
)


# With an API key, the unit starts through the launcher since issue 22 (the key left
# the command line): the template's ExecStart and its --api-key line, as they are now.
LAUNCHER = " /usr/local/libexec/gpufleet-sglang/secret_exec.py --api-key=SGLANG_API_KEY --"


def keyed_since_templates(text):
    """The frozen template's unit with issue 22's launcher in place of the key's line."""
    text = text.replace(" \\\n    --api-key ${SGLANG_API_KEY}\n", "\n")
    return text.replace(" -m sglang.launch_server", LAUNCHER + " -m sglang.launch_server", 1)


@pytest.mark.parametrize("name", sorted(CASES))
def test_unit_matches_the_template(name):
    p = CASES[name]
    lines = render_unit(p).splitlines(True)
    for added in ADDED_SINCE_TEMPLATES:
        assert lines.count(added + "\n") == 1
    kept = "".join(line for line in lines if line.rstrip("\n") not in ADDED_SINCE_TEMPLATES)
    expected = jinja_render("server.service.j2", p)
    if p["api_key"]:
        assert "--api-key ${SGLANG_API_KEY}" in expected  # what the rewrite replaces
        expected = keyed_since_templates(expected)
    assert kept == expected


@pytest.mark.parametrize("name", sorted(CASES))
def test_env_matches_the_template(name):
    p = CASES[name]
    assert render_env(p) == jinja_render("server.env.j2", p)


def test_unit_structure():
    text = render_unit(params(api_key="x"))
    lines = text.splitlines()
    assert lines[0] == HEADER
    assert lines[1] == "# Strategy tp8-ep8 (tp 8, pp 1, ep 8, dp 1) on SGLang 0.5.9."
    # the key is no argument of the unit: the launcher appends it in the process
    assert ("ExecStart=/opt/sglang/0.5.9/bin/python /usr/local/libexec/gpufleet-sglang/"
            "secret_exec.py --api-key=SGLANG_API_KEY -- -m sglang.launch_server \\") in lines
    assert "    --model-path /models/kimi-k2 \\" in lines
    assert "${SGLANG_API_KEY}" not in text
    assert lines[lines.index("ExecStart=/opt/sglang/0.5.9/bin/python /usr/local/libexec/"
                             "gpufleet-sglang/secret_exec.py --api-key=SGLANG_API_KEY -- -m "
                             "sglang.launch_server \\") + 1] == "    --model-path /models/kimi-k2 \\"
    assert "EnvironmentFile=/etc/sglang/sglang.env" in lines
    assert "x" not in [ln.split("=", 1)[-1] for ln in lines]
    assert text.endswith("[Install]\nWantedBy=multi-user.target\n")


def test_env_holds_secrets_escaped():
    text = render_env(params(api_key='a"b\\c', hf_token="hf", environment={"Z": "1", "a": "2"}))
    assert 'SGLANG_API_KEY="a\\"b\\\\c"\n' in text
    assert 'HF_TOKEN="hf"\n' in text
    assert text.index('a="2"') < text.index('Z="1"')  # dictsort ignores case


def test_no_api_key_no_api_key_line():
    assert "--api-key" not in render_unit(params(api_key=None))
    assert "secret_exec" not in render_unit(params(api_key=""))
    assert "/srv/launch.py --api-key=SGLANG_API_KEY --" in render_unit(
        params(api_key="k", secret_exec="/srv/launch.py"))
    assert "SGLANG_API_KEY" not in render_env(params(api_key=None, hf_token=None, pp_layer_partition=None))


def test_unit_without_arguments_has_no_dangling_continuation():
    text = render_unit(params(argv=[]))
    assert "ExecStart=/opt/sglang/0.5.9/bin/python -m sglang.launch_server\nRestart=on-failure" in text


def test_layout_needs_its_keys():
    with pytest.raises(ValueError, match="layout lacks dp"):
        render_unit(params(layout={"tp": 8, "pp": 1, "ep": 1}))
    with pytest.raises(ValueError, match="strategy"):
        render_unit(params(strategy=None, layout={"tp": 8, "pp": 1, "ep": 1, "dp": 1}))
    assert "# Strategy tp8-ep8 " in render_unit(params(strategy=None))


@pytest.mark.parametrize("argv, lines", [
    ([], []),
    (["--a"], ["--a"]),
    (["--a", "1", "--b", "--c", "x y", "z"], ["--a 1", "--b", '--c "x y" z']),
    (["pos", "--a", "-1"], ["pos", "--a -1"]),
    (["--p", "50%", "$X"], ["--p 50%% $$X"]),
])
def test_argv_lines(argv, lines):
    assert argv_lines(argv) == lines


def test_systemd_arg_is_the_filter():
    for value in ["plain", "Kimi K2.5", "50%", "$HOME", 'q"uote', "a\\b", True, 8]:
        assert systemd_arg(value) == filter_systemd_arg(value)
    with pytest.raises(ValueError, match="NUL"):
        systemd_arg("a\x00b")


def test_mask_env():
    text = render_env(params(api_key="topsecret", environment={"X": "value"}))
    masked = mask_env(text)
    assert "topsecret" not in masked and "value" not in masked
    assert "SGLANG_API_KEY=***" in masked and "X=***" in masked and "HOME=***" in masked
    assert masked.startswith(HEADER + "\n")
    assert mask_env(None) == ""
    assert mask_env(text.encode()) == masked


def test_decide():
    assert decide("u", "e", "u", "e") == {
        "unit_changed": False, "env_changed": False, "restart": False, "has_last_good": True}
    assert decide(None, None, "u", "e") == {
        "unit_changed": True, "env_changed": True, "restart": True, "has_last_good": False}
    assert decide("u", "old", "u", "e") == {
        "unit_changed": False, "env_changed": True, "restart": True, "has_last_good": True}
    assert decide("old", "e", "u", "e")["restart"] is True
    assert decide("u", None, "u", "e") == {
        "unit_changed": False, "env_changed": True, "restart": True, "has_last_good": False}
    assert decide(b"u", b"e", b"u", b"e")["restart"] is False


NOW = datetime.datetime(2025, 1, 31, 12, 0, 5, tzinfo=datetime.timezone.utc)


def test_record_new():
    p = params(port=30000)
    rec = record(None, p, "abc", NOW, restarted=True, env_sha1="def",
                 decision={"run_sha256": "f00", "pending": ["Service.PrivateMounts"], "pending_pid": 7,
                           "restart_owed_pid": 6})
    assert rec == {
        "strategy": "tp8-ep8", "layout": LAYOUT, "release": "0.5.9", "argv": p["argv"],
        "unit_sha1": "abc", "env_sha1": "def", "service": "sglang", "port": 30000,
        "deployed_at": "2025-01-31T12:00:05Z", "run_sha256": "f00", "run_spec_version": 1,
        "pending": ["Service.PrivateMounts"], "pending_pid": 7, "restart_owed_pid": 6}
    assert tuple(sorted(rec)) == tuple(sorted(RECORD_KEYS))


def test_record_keeps_the_time_unless_restarted():
    p = params(port=30000)
    previous = record({}, p, "abc", NOW, restarted=True)
    later = NOW + datetime.timedelta(hours=1)
    assert record(previous, p, "abc", later, restarted=False)["deployed_at"] == "2025-01-31T12:00:05Z"
    assert record(previous, p, "def", later, restarted=True)["deployed_at"] == "2025-01-31T13:00:05Z"
    # a previous record without a time (or none at all) gets one
    assert record({"strategy": "x"}, p, "abc", later, False)["deployed_at"] == "2025-01-31T13:00:05Z"
    assert record(previous, p, "abc", "2030-01-01T00:00:00Z", True)["deployed_at"] == "2030-01-01T00:00:00Z"


def test_record_port_from_argv():
    assert record({}, params(), "x", NOW, True)["port"] == 30000
    assert port_of(params(port=1234)) == 1234
    assert port_of(params(argv=["--port=31000"])) == 31000
    assert port_of(params(argv=["--model-path", "/m"])) is None


def test_record_text_is_to_nice_json():
    from ansible.plugins.filter.core import to_nice_json
    rec = record({}, params(), hashlib.sha1(b"u").hexdigest(), NOW, True)
    assert record_text(rec) == to_nice_json(rec) + "\n"
    assert parse_record(record_text(rec)) == rec
    assert parse_record(record_text(rec).encode()) == rec
    assert parse_record(None) == {}
    assert parse_record("not json") == {}
    assert parse_record(json.dumps([1])) == {}


# --- the account ----------------------------------------------------------------------------
from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout._server_unit import (  # noqa: E402
    account_settings,
    useradd_args,
    usermod_args,
)

WANTED = account_settings({"user": "sglang", "group": "sglang", "device_groups": ["video", "render"],
                           "home": "/var/lib/sglang"})


def test_useradd_creates_a_system_account_without_login_or_home():
    assert useradd_args(WANTED) == ["--system", "--gid", "sglang", "--home-dir", "/var/lib/sglang",
                                    "--no-create-home", "--shell", "/usr/sbin/nologin",
                                    "--groups", "video,render", "sglang"]


def test_usermod_changes_nothing_when_all_is_as_wanted():
    current = {"gid": 997, "home": "/var/lib/sglang", "shell": "/usr/sbin/nologin"}
    assert usermod_args(WANTED, current, 997, {"video": True, "render": True}) == []


def test_usermod_fixes_only_what_differs():
    current = {"gid": 100, "home": "/home/sglang", "shell": "/bin/bash"}
    assert usermod_args(WANTED, current, 997, {"video": True, "render": False}) == [
        "--gid", "sglang", "--append", "--groups", "render", "--home", "/var/lib/sglang",
        "--shell", "/usr/sbin/nologin", "sglang"]
