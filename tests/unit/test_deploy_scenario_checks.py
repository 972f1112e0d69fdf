# -*- coding: utf-8 -*-
"""The deploy scenario's check scripts (extensions/molecule/deploy/files/*.py), which replaced
the Jinja regexes, the ``wc``/``grep`` and the filter chains that parsed what converge.yml,
verify.yml, verify_pending.yml, verify_status.yml, verify_load.yml and tasks/apply_pending.yml
read (issue 47): nested deploy.yml and status.yml runs, status.yml's JSON report, deployment
records, the emulator's --help record, apt's history and dpkg-query's answer.

The inputs are shaped as the scenario gets them: ansible-playbook's default callback with
ANSIBLE_CALLBACK_RESULT_FORMAT=json (a debug result as its indented JSON, a failure on one
line, the diff from the callback's own ``_get_diff``, the recap from its ``hostcolor`` and
``colorize``); the role's report line (roles/server/tasks/rollout.yml) around the unit step's
summary (``_server_unit.plan`` and ``summary`` over rendered units); the health wait's
summaries (``_load_phases.LoadProgress``) and server_health's failure text; status.yml's
table and report (``_status.row``, ``_status_fleet.fleet``); records of
``_server_unit.record``; the emulator's ``state.append_record``. The container reads go
through a stand-in ``podman`` that runs the scripts' reader on a directory per host. Each
check has a control: the bad input it exists to catch."""

import importlib.util
import json
import os
import stat
import sys

import pytest

from ansible.plugins.callback import CallbackBase
from ansible.utils.color import colorize, hostcolor

from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout import _load_phases, _server_unit
from ansible_collections.gpufleet.sglang.plugins.module_utils.status import _status, _status_fleet
from ansible_collections.gpufleet.sglang.tests.paths import ROOT

FILES = os.path.join(ROOT, "extensions", "molecule", "deploy", "files")
sys.path.insert(0, FILES)  # as for the scripts themselves: their folder first (files/_deploy_nested.py)


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


nested = sys.modules["_deploy_nested"] = _load("_deploy_nested", os.path.join(FILES, "_deploy_nested.py"))
deploy_run = _load("deploy_run", os.path.join(FILES, "deploy_run.py"))
status_run = _load("status_run", os.path.join(FILES, "status_run.py"))
install_check = _load("install_check", os.path.join(FILES, "install_check.py"))
emulator_state = _load("emulator_state", os.path.join(ROOT, "tests", "emulator", "src", "sglang", "_emulator",
                                                      "state.py"))

HOSTS = ["gpufleet-mol-1", "gpufleet-mol-2", "gpufleet-mol-3"]
RELEASE = "0.5.9"
ENV_PATH = "/etc/sglang/sglang.env"
PHASES = ["starting", "loading weights", "allocating the KV cache", "capturing CUDA graphs", "warming up", "ready"]
RECORD = "/etc/ansible/facts.d/sglang.fact"
HELP_CALLS = "/var/lib/sglang-emulator/help-calls.jsonl"
APT_HISTORY = "/var/log/apt/history.log"


# --- the server role's files and words ---------------------------------------------------------

def params(strategy):
    layouts = {"pp8": (1, 8, 1, []), "ep8": (8, 1, 8, ["--ep-size", "8"])}
    tp, pp, ep, extra = layouts[strategy]
    return {"service_name": "sglang", "python": "/opt/sglang/venvs/%s/bin/python" % RELEASE, "user": "sglang",
            "group": "sglang", "device_groups": ["video"], "home": "/var/lib/sglang", "config_dir": "/etc/sglang",
            "restart_sec": 10, "start_limit_burst": 3, "start_limit_interval_sec": 3600, "timeout_stop_sec": 120,
            "release": RELEASE, "environment": {"SGLANG_EMULATOR_LOAD_SECONDS": "3"}, "strategy": strategy,
            "layout": {"name": strategy, "tp": tp, "pp": pp, "ep": ep, "dp": 1},
            "argv": ["--model-path", "/models/kimi-k2.5", "--tp-size", str(tp), "--pp-size", str(pp)] + extra
            + ["--port", "30000"]}


def unit_of(strategy):
    return _server_unit.render_unit(params(strategy))


ENV = _server_unit.render_env(params("pp8"))
# what 0.1.0 rendered (tests/testbed/previous-release.commit): no Documentation=, no PrivateMounts=
UNIT_0_1_0 = "".join(line for line in unit_of("pp8").splitlines(True)
                     if not line.startswith(("Documentation=", "PrivateMounts=")))


def upgrade_plan():
    """The unit step's answer when this tree deploys pp8 over 0.1.0's unit."""
    return _server_unit.plan(UNIT_0_1_0, ENV, unit_of("pp8"), ENV, ENV_PATH, RELEASE, rec={"release": RELEASE},
                             main_pid=4242)


def record_after(plan, strategy="pp8"):
    unit = unit_of(strategy)
    return _server_unit.record({}, params(strategy), _server_unit._sha1(unit), "2026-12-01T00:50:00Z", True,
                               _server_unit._sha1(ENV), plan)


def report_line(host, strategy, plan=None, health=None, check=False, started=False, derived=None):
    """roles/server/tasks/rollout.yml's "Report what runs here" message, as its folded
    template renders it: a newline before the release's messages (none: a final newline)."""
    restart = bool(plan and plan["restart"])
    outcome = (("would restart (check mode)" if check else "restarted, %s" % (health or "ready"))
               if restart else ("started" if started else "unchanged, no restart"))
    summary = _server_unit.summary(plan) if plan else "no change"
    outcome += (" (%s)" % summary) if summary not in ("no change", "installed") else ""
    return "%s: %s on SGLang %s at http://127.0.0.1:30000, %s\n%s" % (
        host, strategy, RELEASE, outcome, ("; the release derived: %s" % "; ".join(derived)) if derived else "")


def load_summaries(shards=64, loaded=(8, 32, 64), capture=True):
    """What the health wait shows, one step at a time (health_wait.yml's debug), from a
    start's journal lines folded by _load_phases.LoadProgress."""
    progress = _load_phases.LoadProgress(1000.0)
    out = [progress.describe(1000.5)]
    progress.feed(1001.0, "Load weight begin. avail mem=90.00 GB")
    for done in loaded:
        progress.feed(1001.0 + done / 16.0, "Loading safetensors checkpoint shards: %d%% Completed | %d/%d [00:01<00:03]"
                      % (done * 100 // shards, done, shards))
        out.append(progress.describe(1001.1 + done / 16.0))
    progress.feed(1006.0, "Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16")
    if capture:
        progress.feed(1006.2, "Capture cuda graph begin. This can take up to several minutes.")
        out.append(progress.describe(1007.0))
    progress.feed(1008.2, "Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    out.append(progress.describe(1008.5))
    progress.feed(1009.1, "The server is fired up and ready to roll!")
    progress.enter("ready", 1009.1)
    out.append(progress.describe(1009.2))
    return out


def health_failure(port=30000, waited=20, state=None, was=None):
    """server_health's failure message (plugins/modules/server_health.py fail())."""
    progress = _load_phases.LoadProgress(1000.0)
    progress.feed(1001.0, "Load weight begin. avail mem=90.00 GB")
    progress.feed(1002.0, "Loading safetensors checkpoint shards: 50% Completed | 32/64 [00:01<00:01]")
    msg = "server at http://127.0.0.1:%d not ready after %d s: %s" % (port, waited, state or "port %d never opened" % port)
    msg = "%s; it was %s" % (msg, was or progress.describe(1020.1))
    return msg + "\nlast journal lines of sglang.service:\n2026-12-01T00:50:01+0000 gpufleet-mol-1 python[812]: Load weight begin."


# --- ansible-playbook's default callback, ANSIBLE_CALLBACK_RESULT_FORMAT=json ------------------

def banner(kind, name=None):
    title = "%s [%s]" % (kind, name) if name else kind
    return "\n%s %s\n" % (title, "*" * max(3, 79 - len(title)))


def ok_debug(host, msg):
    return "ok: [%s] => %s\n" % (host, json.dumps({"msg": msg}, indent=4, sort_keys=True))


def fatal(host, msg):
    return "fatal: [%s]: FAILED! => %s\n" % (host, json.dumps({"changed": False, "msg": msg}, sort_keys=True))


def error_block(msg):
    """2.19's "[ERROR]: Task failed" lines before a failure: the message with its real newlines."""
    return "[ERROR]: Task failed: Action failed: %s\nOrigin: /work/main/roles/server/tasks/rollback.yml:30:3\n\n" % msg


def file_diff(before, after, path="/etc/systemd/system/sglang.service"):
    return CallbackBase()._get_diff([{"before_header": path, "after_header": path, "before": before,
                                      "after": after}])


def play_recap(stats):
    """``stats``: host -> (ok, changed, failed)."""
    lines = [banner("PLAY RECAP")]
    for host, (ok, changed, failed) in stats.items():
        t = {"ok": ok, "changed": changed, "unreachable": 0, "failures": failed, "skipped": 4, "rescued": 0,
             "ignored": 0}
        lines.append("%s : %s %s %s %s %s %s %s\n" % (
            hostcolor(host, t, False), colorize("ok", t["ok"], None), colorize("changed", t["changed"], None),
            colorize("unreachable", t["unreachable"], None), colorize("failed", t["failures"], None),
            colorize("skipped", t["skipped"], None), colorize("rescued", t["rescued"], None),
            colorize("ignored", t["ignored"], None)))
    return "".join(lines) + "\n"


def deploy_output(reports, batches=1, diff="", progress=None, failure=None, changed=0, failed=()):
    """A nested deploy.yml's output: the plays, the Roll out play once per batch with the
    health wait's messages and the hosts' reports, a failure, the recap."""
    out = [banner("PLAY", "Check that the deploy has hosts"), banner("TASK", "Check that the target selects hosts")]
    out.append("ok: [%s]\n" % HOSTS[0])
    hosts = list(reports)
    per = -(-len(hosts) // batches)
    for index in range(batches):
        batch = hosts[index * per:(index + 1) * per]
        out.append(banner("PLAY", "Roll out"))
        out.append(banner("TASK", "gpufleet.sglang.server : Install the server's unit and environment file"))
        for host in batch:
            out.append(diff)
            out.append("changed: [%s]\n" % host if diff else "ok: [%s]\n" % host)
        for host, texts in (progress or {}).items():
            if host in batch:
                for text in texts:
                    out.append(banner("TASK", "gpufleet.sglang.server : Show what the server is doing"))
                    out.append(ok_debug(host, "%s: %s" % (host, text)))
        if failure:
            out.append(banner("TASK", "gpufleet.sglang.server : Wait for the server to load"))
            out.append(fatal(failure[0], failure[1]))
        out.append(banner("TASK", "gpufleet.sglang.server : Report what runs here"))
        for host in batch:
            if reports[host] is not None:
                out.append(ok_debug(host, reports[host]))
        if failure and len(failure) > 2:
            out.append(banner("TASK", "gpufleet.sglang.server : Fail with what the new server said"))
            out.append(error_block(failure[2]))
            out.append(fatal(failure[0], failure[2]))
    out.append(banner("PLAY", "Converge the routers' membership"))
    out.append(play_recap(dict((h, (40, changed, 1 if h in failed else 0)) for h in hosts)))
    return "".join(out)


def figures(output, rc=0, hosts=tuple(HOSTS), phases=(), counts=()):
    return json.loads(json.dumps(deploy_run.figures(output, rc, hosts, phases, counts)))


# --- a stand-in podman, and commands that print what a nested run printed ---------------------

FAKE_PODMAN = r'''#!%s
"""podman exec HOST python3 -c CODE PATH...: CODE over <root>/HOST/PATH (keys: PATH);
podman run --rm IMAGE dpkg-query -W PKG...: what <root>/image.json says (stdout, stderr, rc)."""
import json, os, subprocess, sys
root = os.path.dirname(os.path.abspath(__file__))
args = sys.argv[1:]
if args[:1] == ["exec"]:
    host, code, paths = args[1], args[4], args[5:]
    if args[2:4] != ["python3", "-c"] or not os.path.isdir(os.path.join(root, host)):
        sys.stderr.write("Error: no container with name or ID %%r found: no such container\n" %% host)
        sys.exit(125)
    mapped = [os.path.join(root, host) + path for path in paths]
    done = subprocess.run([sys.executable, "-c", code] + mapped, stdout=subprocess.PIPE, check=True)
    doc = json.loads(done.stdout)
    print(json.dumps(dict((path, doc[one]) for path, one in zip(paths, mapped))))
elif args[:2] == ["run", "--rm"]:
    with open(os.path.join(root, "image.json")) as handle:
        answer = json.load(handle)
    sys.stdout.write(answer["stdout"])
    sys.stderr.write(answer["stderr"])
    sys.exit(answer["rc"])
else:
    sys.exit(125)
''' % sys.executable


def _executable(path, text):
    with open(str(path), "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(str(path), os.stat(str(path)).st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def podman(tmp_path):
    """The stand-in podman; ``put(host, path, text)`` writes a file in a host's container."""
    root = tmp_path / "containers"
    root.mkdir()
    exe = _executable(root / "podman", FAKE_PODMAN)

    def put(host, path, text):
        target = root / host / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")

    def image(stdout, stderr, rc):
        (root / "image.json").write_text(json.dumps({"stdout": stdout, "stderr": stderr, "rc": rc}))

    return {"exe": exe, "put": put, "image": image, "root": root}


def printing(tmp_path, output, rc=0, writes=None, name="nested"):
    """A command that prints ``output`` (as a nested ansible-playbook did), writes ``writes``
    (path -> text) and exits ``rc``."""
    out = tmp_path / ("%s.out" % name)
    out.write_text(output, encoding="utf-8")
    script = ("import sys\nsys.stdout.write(open(%r, encoding='utf-8').read())\n"
              "sys.stderr.write('[WARNING]: a warning on stderr\\n')\n" % str(out))
    for path, text in (writes or {}).items():
        script += "open(%r, 'w', encoding='utf-8').write(%r)\n" % (path, text)
    script += "sys.exit(%d)\n" % rc
    return [sys.executable, "-c", script]


def run_main(module, argv, capsys):
    rc = module.main(argv)
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 else None), err


# --- deploy_run: the upgrade from 0.1.0 (converge.yml) ----------------------------------------

def test_the_upgrade_report_names_the_pending_and_reload_only_changes():
    plan = upgrade_plan()
    out = deploy_output(dict((h, report_line(h, "pp8", plan)) for h in HOSTS), changed=2)
    fig = figures(out, counts=["restarted, "])
    report = fig["hosts"]["gpufleet-mol-2"]["report"]
    assert (report["layout"], report["release"], report["action"]) == ("pp8", RELEASE, "unchanged, no restart")
    assert report["unit"]["pending"] == ["Service.PrivateMounts"]
    assert report["unit"]["reload"] == ["Unit.Documentation"]
    assert report["unit_kinds"] == ["pending", "reload"] and report["unit_first"] == "pending"
    assert report["unit_unknown"] == [] and report["unparsed"] is None
    assert fig["counts"] == {"restarted, ": 0}
    assert fig["changed"] is True and fig["rc"] == 0


def test_a_restart_anywhere_in_the_upgrade_is_counted():
    # the control: one host restarted (its run changed), which the upgrade must not do
    plan = upgrade_plan()
    reports = dict((h, report_line(h, "pp8", plan)) for h in HOSTS)
    restart = _server_unit.plan(unit_of("pp8"), ENV, unit_of("ep8"), ENV, ENV_PATH, RELEASE, rec={"release": RELEASE},
                                main_pid=4242)
    reports["gpufleet-mol-3"] = report_line("gpufleet-mol-3", "pp8", restart, health=load_summaries()[-1])
    fig = figures(deploy_output(reports), counts=["restarted, "])
    assert fig["counts"]["restarted, "] == 1
    other = fig["hosts"]["gpufleet-mol-3"]["report"]
    assert other["action"] == "restarted" and other["unit"]["restart"] == ["argv"]
    assert other["health"].startswith("ready after ")
    assert fig["hosts"]["gpufleet-mol-1"]["report"]["action"] == "unchanged, no restart"


def test_a_host_is_judged_by_its_own_report():
    # the control: the old regexes searched the whole output, so another host's report
    # could stand in for a host that printed none
    plan = upgrade_plan()
    reports = dict((h, report_line(h, "pp8", plan)) for h in HOSTS)
    reports["gpufleet-mol-2"] = None
    fig = figures(deploy_output(reports))
    assert fig["hosts"]["gpufleet-mol-2"]["report"] is None
    assert fig["hosts"]["gpufleet-mol-1"]["report"]["layout"] == "pp8"


def test_a_changed_pending_list_is_not_the_upgrade_from_0_1_0():
    # the control: a pending list that merely starts with PrivateMounts passed the old
    # substring check; the report's list must be exactly it
    plan = dict(upgrade_plan(), pending=["Service.PrivateMounts", "Service.ProtectProc"])
    fig = figures(deploy_output(dict((h, report_line(h, "pp8", plan)) for h in HOSTS)))
    pending = fig["hosts"]["gpufleet-mol-1"]["report"]["unit"]["pending"]
    assert pending == ["Service.PrivateMounts", "Service.ProtectProc"]


def test_a_same_unit_reports_no_summary_and_a_comment_change_its_own_kind():
    applied = record_after(dict(upgrade_plan(), pending=[], pending_pid=None))
    none = _server_unit.plan(unit_of("pp8"), ENV, unit_of("pp8"), ENV, ENV_PATH, RELEASE, rec=applied, main_pid=4242)
    assert none["action"] == "none"
    comments = dict(none, action="comments", pending=[], reload=[])
    fig = figures(deploy_output({HOSTS[0]: report_line(HOSTS[0], "pp8", none),
                                 HOSTS[1]: report_line(HOSTS[1], "pp8", comments),
                                 HOSTS[2]: report_line(HOSTS[2], "pp8", None, started=True)}))
    first, second, third = (fig["hosts"][h]["report"] for h in HOSTS)
    assert first["unit_kinds"] == [] and first["unit_first"] is None and first["unit_summary"] is None
    assert second["unit_first"] == "comments"
    assert third["action"] == "started"


def test_changed_follows_the_recap():
    plan = upgrade_plan()
    reports = dict((h, report_line(h, "pp8", plan)) for h in HOSTS)
    assert figures(deploy_output(reports, changed=3))["changed"] is True
    # the control: a re-run that changed nothing
    quiet = figures(deploy_output(reports, changed=0))
    assert quiet["changed"] is False
    assert quiet["recap"]["gpufleet-mol-1"] == {
        "ok": 40, "changed": 0, "unreachable": 0, "failed": 0, "skipped": 4, "rescued": 0, "ignored": 0}


def test_the_release_derived_messages_stay_out_of_the_unit_summary():
    plan = upgrade_plan()
    line = report_line(HOSTS[0], "pp8", plan, derived=["--cuda-graph-max-bs (1 of 2): 160 (asked 256)"])
    report = deploy_run.report(line)
    assert report["unit"]["pending"] == ["Service.PrivateMounts"]
    assert report["derived"] == "--cuda-graph-max-bs (1 of 2): 160 (asked 256)"
    assert deploy_run.report("%s: loading weights 32/64 shards (50%%), 1.0s in this phase" % HOSTS[0]) is None


# --- deploy_run: check mode, apply_pending, records -------------------------------------------

def test_check_mode_reports_the_restart_and_the_diff_adds_the_flag():
    restart = _server_unit.plan(unit_of("pp8"), ENV, unit_of("ep8"), ENV, ENV_PATH, RELEASE,
                                rec={"release": RELEASE}, main_pid=4242)
    out = deploy_output(dict((h, report_line(h, "ep8", restart, check=True)) for h in HOSTS),
                        diff=file_diff(unit_of("pp8"), unit_of("ep8")))
    fig = figures(out)
    assert all(fig["hosts"][h]["report"]["action"] == "would restart (check mode)" for h in HOSTS)
    assert fig["hosts"][HOSTS[0]]["report"]["layout"] == "ep8"
    assert "--ep-size 8" in fig["diff_added_flags"]
    assert "--pp-size 1" in fig["diff_added_flags"] and "--pp-size 8" not in fig["diff_added_flags"]


def test_a_flag_the_diff_removes_or_keeps_is_not_added():
    # the control: the old check found "--ep-size 8" anywhere in the output
    out = deploy_output({HOSTS[0]: None}, diff=file_diff(unit_of("ep8"), unit_of("pp8")))
    out += ok_debug(HOSTS[0], "%s: the release derived: --ep-size 8 kept" % HOSTS[0])
    fig = figures(out, hosts=[HOSTS[0]])
    assert "--ep-size 8" not in fig["diff_added_flags"]
    assert "--pp-size 8" in fig["diff_added_flags"]


def test_apply_pending_restarts_in_two_batches_and_names_what_it_applied():
    rec = record_after(upgrade_plan())
    applied = _server_unit.plan(unit_of("pp8"), ENV, unit_of("pp8"), ENV, ENV_PATH, RELEASE, rec=rec,
                                main_pid=4242, apply_pending=True)
    ready = load_summaries()[-1]
    out = deploy_output(dict((h, report_line(h, "pp8", applied, health=ready)) for h in HOSTS), batches=2)
    fig = figures(out)
    assert fig["plays"]["Roll out"] == 2
    report = fig["hosts"]["gpufleet-mol-3"]["report"]
    assert report["action"] == "restarted" and report["unit"]["apply_pending"] == ["Service.PrivateMounts"]
    assert report["health"] == ready
    # the control: one batch
    assert figures(deploy_output(dict((h, report_line(h, "pp8", applied)) for h in HOSTS)))["plays"]["Roll out"] == 1


def test_deploy_reads_each_hosts_record_after_the_run(tmp_path, podman, capsys):
    plan = dict(upgrade_plan(), pending=[], pending_pid=None)
    for host in HOSTS:
        podman["put"](host, RECORD, _server_unit.record_text(record_after(plan)))
    out = deploy_output(dict((h, report_line(h, "pp8", plan)) for h in HOSTS))
    rc, fig, err = run_main(deploy_run, ["deploy", "--hosts", ",".join(HOSTS), "--records", "--podman", podman["exe"],
                                         "--"] + printing(tmp_path, out, rc=0), capsys)
    assert rc == 0, err
    assert [fig["hosts"][h]["record_pending"] for h in HOSTS] == [[], [], []]
    # the run's output goes to stderr, for a person
    assert "PLAY [Roll out]" in err and "[WARNING]: a warning on stderr" in err
    # the control: a record that still lists what was pending
    podman["put"](HOSTS[1], RECORD, _server_unit.record_text(record_after(upgrade_plan())))
    rc, fig, err = run_main(deploy_run, ["deploy", "--hosts", ",".join(HOSTS), "--records", "--podman", podman["exe"],
                                         "--"] + printing(tmp_path, out, rc=2), capsys)
    assert rc == 0 and fig["rc"] == 2
    assert fig["hosts"][HOSTS[1]]["record_pending"] == ["Service.PrivateMounts"]


def test_a_record_that_cannot_be_read_fails_the_script(tmp_path, podman, capsys):
    # the control: the slurp it replaces failed the task on a missing record
    podman["put"](HOSTS[0], RECORD, _server_unit.record_text(record_after(upgrade_plan())))
    out = deploy_output({HOSTS[0]: None, HOSTS[1]: None})
    rc, _fig, err = run_main(deploy_run, ["deploy", "--hosts", ",".join(HOSTS[:2]), "--records",
                                          "--podman", podman["exe"], "--"] + printing(tmp_path, out), capsys)
    assert rc == 1 and "gpufleet-mol-2" in err and "no container" in err
    podman["put"](HOSTS[1], RECORD, "{\"strategy\": \"pp8\"}\n")
    rc, _fig, err = run_main(deploy_run, ["deploy", "--hosts", ",".join(HOSTS[:2]), "--records",
                                          "--podman", podman["exe"], "--"] + printing(tmp_path, out), capsys)
    assert rc == 1 and "holds no pending list" in err


def test_previous_exports_then_deploys_with_that_collection_path(tmp_path, capsys):
    collections = str(tmp_path / ".cache" / "previous-release" / "31a0c58008f92a3d984b3f5c22fe9503ce7a1443")
    export = _executable(tmp_path / "previous-release",
                         "#!/bin/sh\necho 'previous release: 31a0c58 (31a0c58008f92a3d984b3f5c22fe9503ce7a1443)' >&2\n"
                         "echo '%s'\n" % collections)
    seen = tmp_path / "seen"
    deploy = [sys.executable, "-c", "import os; open(%r, 'w').write(os.environ['ANSIBLE_COLLECTIONS_PATH']); "
              "print('PLAY RECAP')" % str(seen)]
    rc, fig, err = run_main(deploy_run, ["previous", "--export", export, "--"] + deploy, capsys)
    assert rc == 0, err
    assert fig["collections"] == collections and fig["commit"] == "31a0c58008f92a3d984b3f5c22fe9503ce7a1443"
    assert fig["rc"] == 0 and seen.read_text() == collections
    # the control: an export that fails deploys nothing
    failing = _executable(tmp_path / "failing", "#!/bin/sh\necho 'fatal: bad revision' >&2\nexit 128\n")
    seen.unlink()
    rc, _fig, err = run_main(deploy_run, ["previous", "--export", failing, "--"] + deploy, capsys)
    assert rc == 1 and not seen.exists() and "rc 128" in err


# --- deploy_run: a load you can watch, a hang while loading (verify_load.yml) ----------------

def test_the_load_phases_in_order_with_shards_and_the_ready_summary():
    host = HOSTS[0]
    steps = load_summaries()
    ready = _server_unit.plan(unit_of("ep8"), ENV, unit_of("ep8"), _server_unit.render_env(
        dict(params("ep8"), environment={"SGLANG_EMULATOR_LOAD_SECONDS": "6"})), ENV_PATH, RELEASE,
        rec={"release": RELEASE}, main_pid=4242)
    out = deploy_output({host: report_line(host, "ep8", ready, health=steps[-1])}, progress={host: steps})
    fig = figures(out, hosts=[host], phases=PHASES)
    watch = fig["hosts"][host]
    assert watch["phases"] == ["starting", "loading weights", "capturing CUDA graphs", "warming up", "ready"]
    assert watch["phases_in_order"] is True
    assert watch["shard_readings"] == 3 and watch["shard_totals"] == [64]
    assert watch["ready_steps"] == ["starting", "loading weights", "allocating the KV cache",
                                    "capturing CUDA graphs", "warming up"]
    assert watch["messages"][0] == "%s: %s" % (host, steps[0])
    assert watch["report"]["action"] == "restarted"


def test_phases_out_of_order_few_phases_no_shards_and_no_capture_are_told():
    host = HOSTS[0]
    steps = load_summaries(capture=False)
    # the controls: the phases seen out of order, only two of them, no shard readings, and a
    # ready summary without the CUDA graphs
    shuffled = figures(deploy_output({host: None}, progress={host: [steps[-1], steps[1]]}), hosts=[host],
                       phases=PHASES)["hosts"][host]
    assert shuffled["phases"] == ["ready", "loading weights"] and shuffled["phases_in_order"] is False
    bare = figures(deploy_output({host: None}, progress={host: [steps[0], steps[-1]]}), hosts=[host],
                   phases=PHASES)["hosts"][host]
    assert len(bare["phases"]) == 2 and bare["shard_readings"] == 0 and bare["shard_totals"] == []
    assert "capturing CUDA graphs" not in bare["ready_steps"]
    other = figures(deploy_output({host: None}, progress={host: load_summaries(shards=61, loaded=(61,))}),
                    hosts=[host], phases=PHASES)["hosts"][host]
    assert other["shard_totals"] == [61]
    # another host's progress is not this host's
    assert figures(deploy_output({HOSTS[1]: None}, progress={HOSTS[1]: steps}), hosts=[host],
                   phases=PHASES)["hosts"][host]["phases"] == []


def test_a_hang_while_loading_names_the_phase_and_the_rollback():
    host = HOSTS[0]
    failure = health_failure()
    rolled = ("The new server (ep8, SGLang %s) did not become ready on %s: rolled back to the last known good "
              "server (ep8, SGLang %s), which is ready again after 11.8 s. %s" % (RELEASE, host, RELEASE, failure))
    fig = figures(deploy_output({host: None}, failure=(host, failure, rolled), failed=[host]), rc=2, hosts=[host])
    assert fig["rc"] == 2
    assert len(fig["not_ready"]) == 1
    first = fig["not_ready"][0]
    assert first["port_never_opened"] is True and first["was"] == "loading weights 32/64 shards (50%)"
    assert first["seconds"] == 20
    assert first["text"] == ("not ready after 20 s: port 30000 never opened; "
                             "it was loading weights 32/64 shards (50%)")
    assert fig["rolled_back_to"] == ["ep8"]


def test_another_failure_is_not_the_hang_while_loading():
    host = HOSTS[0]
    # the controls: a server whose port opened but did not answer, one that hung starting,
    # and a rollback to another layout
    answered = health_failure(state="/health last answered 503")
    starting = health_failure(was="starting (port not open yet), 20.0s in this phase, 20.1s since start")
    rolled = ("The new server (ep8, SGLang %s) did not become ready on %s: rolled back to the last known good "
              "server (pp8, SGLang %s), which is ready again after 11.8 s. %s" % (RELEASE, host, RELEASE, starting))
    fig = figures(deploy_output({host: None}, failure=(host, answered)), rc=2, hosts=[host])
    assert fig["not_ready"][0]["port_never_opened"] is False and fig["rolled_back_to"] == []
    fig = figures(deploy_output({host: None}, failure=(host, starting, rolled)), rc=2, hosts=[host])
    assert fig["not_ready"][0]["was"] == "starting (port not open yet)"
    assert fig["rolled_back_to"] == ["pp8"]
    assert figures(deploy_output({host: None}), hosts=[host])["not_ready"] == []


# --- status_run: the fleet's status (verify_status.yml, verify_pending.yml) -------------------

def status_row(host, strategy="ep8", active=True, ready=True, drift=(), pending=(), pid=4242):
    rec = record_after(dict(upgrade_plan(), pending=list(pending), pending_pid=pid if pending else None), "pp8")
    rec["strategy"] = strategy
    props = {"MainPID": str(pid if active else 0), "ActiveState": "active" if active else "inactive",
             "ExecMainStartTimestampMonotonic": "1000000"}
    readiness = {"route": "/health", "ready": ready, "detail": "200" if ready else "connection refused"}
    metrics = {"detail": "not read", "running": None, "queued": None, "gen_throughput": None}
    return _status.row(host, rec, props, 3725 * 1000000, readiness, metrics, list(drift), 30000, "sglang.service",
                       RECORD)


def status_output_and_report(rows):
    """status.yml's output (the table's debug, then its fail when a host is not ok) and the
    JSON report it writes (to_nice_json)."""
    table = _status_fleet.fleet(list(rows), rows, _status.table_header())
    out = banner("PLAY", "Report what runs where") + banner("TASK", "Print the fleet table")
    out += ok_debug(HOSTS[0], "\n".join(table["lines"]))
    out += banner("TASK", "Write the fleet table as JSON") + "ok: [%s -> localhost]\n" % HOSTS[0]
    if table["failures"]:
        msg = "\n".join(["unhealthy or drifted: %d of %d hosts" % (len(table["failures"]), len(rows))]
                        + table["failures"])
        out += banner("TASK", "Fail when a host is unhealthy or drifted") + error_block(msg) + fatal(HOSTS[0], msg)
    out += play_recap(dict((h, (8, 0, 1 if table["failures"] and h == HOSTS[0] else 0)) for h in rows))
    report = {"generated_at": "2026-12-01T01:00:00Z", "ok": not table["failures"], "hosts": table["rows"],
              "missing": table["missing"], "failures": table["failures"]}
    return out, json.dumps(report, indent=4, sort_keys=True), table


def status_figures(rows):
    out, report, _table = status_output_and_report(rows)
    return json.loads(json.dumps(status_run.figures(out, 2 if '"ok": false' in report else 0, json.loads(report))))


def test_a_healthy_fleet_prints_a_serving_row_per_host():
    fig = status_figures(dict((h, status_row(h)) for h in HOSTS))
    assert fig["table"]["columns"][:6] == ["HOST", "STRATEGY", "RELEASE", "PID", "UPTIME", "READY"]
    assert fig["table"]["columns"][-2:] == ["PENDING", "DRIFT"]
    assert fig["table"]["hosts"] == HOSTS and fig["report_hosts"] == HOSTS
    one = fig["hosts"]["gpufleet-mol-2"]
    assert one["cells"]["STRATEGY"] == "ep8" and one["cells"]["READY"] == "yes"
    assert one["cells"]["PID"] == str(one["row"]["main_pid"]) == "4242"
    assert one["cells"]["UPTIME"] == "1h2m" and one["cells"]["DRIFT"] == "no" and one["cells"]["PENDING"] == "-"
    assert one["unlike_serving"] == [] and one["deployed_at_iso"] is True
    assert fig["report"]["ok"] is True and fig["printed_failures"] is None and fig["table"]["failures"] == []


def test_a_stopped_server_is_unlike_a_serving_row():
    # the control: the row of a stopped server (PID -, no uptime, NO)
    rows = dict((h, status_row(h)) for h in HOSTS)
    rows[HOSTS[1]] = status_row(HOSTS[1], active=False, ready=False)
    fig = status_figures(rows)
    stopped = fig["hosts"][HOSTS[1]]
    assert stopped["unlike_serving"] == ["PID", "READY", "UPTIME"]
    assert stopped["row"]["active_state"] == "inactive" and stopped["row"]["main_pid"] is None
    assert fig["printed_failures"] == fig["report"]["failures"]
    assert len(fig["report"]["failures"]) == 1
    assert fig["report"]["failures"][0].startswith("%s: unit sglang.service is inactive; not ready (/" % HOSTS[1])


def test_drift_is_printed_and_written_for_that_host_only():
    rows = dict((h, status_row(h)) for h in HOSTS)
    rows[HOSTS[0]] = status_row(HOSTS[0], drift=["unit file differs from the deployment record"])
    fig = status_figures(rows)
    expected = "%s: drift: unit file differs from the deployment record" % HOSTS[0]
    assert fig["printed_failures"] == [expected] and fig["report"]["failures"] == [expected]
    assert fig["table"]["failures"] == [expected]
    assert fig["hosts"][HOSTS[0]]["row"]["healthy"] and not fig["hosts"][HOSTS[0]]["row"]["ok"]
    assert fig["hosts"][HOSTS[0]]["cells"]["DRIFT"] == "unit file differs from the deployment record"


def test_a_time_without_its_t_is_not_a_deploy_time():
    rows = dict((h, status_row(h)) for h in HOSTS)
    rows[HOSTS[2]]["deployed_at"] = "2026-12-01 00:50:00"
    fig = status_figures(rows)
    assert fig["hosts"][HOSTS[2]]["deployed_at_iso"] is False
    assert fig["hosts"][HOSTS[1]]["deployed_at_iso"] is True


def test_status_runs_with_a_fresh_report_and_reads_the_records(tmp_path, podman, capsys):
    pending = ["Service.PrivateMounts"]
    rows = dict((h, status_row(h, strategy="pp8", pending=pending)) for h in HOSTS)
    out, report, _table = status_output_and_report(rows)
    for host in HOSTS:
        podman["put"](host, RECORD, _server_unit.record_text(record_after(upgrade_plan())))
    path = str(tmp_path / "verify-status" / "pending.json")
    rc, fig, err = run_main(status_run, ["--json", path, "--records", ",".join(HOSTS), "--podman", podman["exe"],
                                         "--"] + printing(tmp_path, out, writes={path: report}), capsys)
    assert rc == 0, err
    host = fig["hosts"][HOSTS[2]]
    assert host["record_pending"] == pending and host["row"]["pending"] == pending
    assert host["cells"]["PENDING"] == host["record_pending_cell"] == "PrivateMounts"
    assert host["cells"]["STRATEGY"] == "pp8" and host["cells"]["DRIFT"] == "no"
    assert fig["tail"] == out.splitlines() and "Print the fleet table" in err
    # the controls: a row that shows nothing pending while the record has it, and a run that
    # writes no report (the one an earlier run left is gone, not read)
    rows[HOSTS[2]] = status_row(HOSTS[2], strategy="pp8")
    out, report, _table = status_output_and_report(rows)
    rc, fig, err = run_main(status_run, ["--json", path, "--records", ",".join(HOSTS), "--podman", podman["exe"],
                                         "--"] + printing(tmp_path, out, writes={path: report}), capsys)
    assert fig["hosts"][HOSTS[2]]["cells"]["PENDING"] == "-" != fig["hosts"][HOSTS[2]]["record_pending_cell"]
    rc, fig, err = run_main(status_run, ["--json", path, "--"] + printing(tmp_path, out, rc=2), capsys)
    assert rc == 0 and fig["report"] is None and fig["report_hosts"] == [] and fig["rc"] == 2
    assert not os.path.exists(path)


def test_a_fleet_with_a_host_that_gave_no_status():
    rows = dict((h, status_row(h)) for h in HOSTS[:2])
    table = _status_fleet.fleet(HOSTS, rows, _status.table_header())
    columns, cells, missing, failures = status_run.table("\n".join(table["lines"]))
    assert [c["HOST"] for c in cells] == HOSTS[:2] and missing == [HOSTS[2]]
    assert failures == table["failures"] and columns[0] == "HOST"


# --- install_check: --help runs, apt's installs, the bare image (verify.yml) ------------------

def help_record(tmp_path, monkeypatch, calls):
    state = tmp_path / "emulator-state"
    monkeypatch.setenv("SGLANG_EMULATOR_STATE_DIR", str(state))
    for pid in range(calls):
        emulator_state.append_record("help-calls.jsonl", {"time": 1764550000.0 + pid, "pid": 800 + pid,
                                                          "release": RELEASE, "COLUMNS": None,
                                                          "file": "launch_server-help-%s.txt" % RELEASE})
    return (state / "help-calls.jsonl").read_text(encoding="utf-8")


# /var/log/apt/history.log after the server role installed the two packages (one entry)
APT = "\n".join([
    "",
    "Start-Date: 2026-12-01  00:40:12",
    "Commandline: /usr/bin/apt-get -y -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold"
    " install python3-requests python3-venv",
    "Install: python3-requests:amd64 (2.28.1+dfsg-1), python3-certifi:amd64 (2022.9.24-1, automatic),"
    " python3-venv:amd64 (3.11.2-1+b1), python3-pip-whl:amd64 (23.0.1+dfsg-1, automatic)",
    "End-Date: 2026-12-01  00:40:19",
    ""])


def test_the_help_runs_apt_installs_and_the_bare_image(tmp_path, monkeypatch, podman, capsys):
    record = help_record(tmp_path, monkeypatch, 2)
    for host in HOSTS:
        podman["put"](host, HELP_CALLS, record)
        podman["put"](host, APT_HISTORY, APT)
    podman["image"]("", "dpkg-query: no packages found matching python3-requests\n"
                        "dpkg-query: no packages found matching python3-venv\n", 1)
    build = _executable(tmp_path / "build-image", "#!/bin/sh\necho localhost/gpufleet-debian12-systemd:0123456789ab\n")
    argv = ["--hosts", ",".join(HOSTS), "--help-calls", HELP_CALLS, "--apt-history", APT_HISTORY,
            "--build-image", build, "--packages", "python3-requests,python3-venv", "--podman", podman["exe"]]
    rc, fig, err = run_main(install_check, argv, capsys)
    assert rc == 0, err
    one = fig["hosts"]["gpufleet-mol-3"]
    assert one["help_calls"] == 2 and one["help_calls_unreadable"] == 0
    assert "python3-requests" in one["apt_installed"] and "python3-venv" in one["apt_installed"]
    assert fig["image"] == "localhost/gpufleet-debian12-systemd:0123456789ab"
    assert fig["image_rc"] == 1 and fig["image_installed"] == []
    assert "no packages found matching python3-venv" in fig["image_output"]

    # the controls: a third --help run, a torn line, an install of another package whose name
    # starts the same, no history at all, an image that has one of them
    podman["put"](HOSTS[0], HELP_CALLS, help_record(tmp_path, monkeypatch, 1))  # appends: 3 records
    podman["put"](HOSTS[1], HELP_CALLS, record + '{"time": 17645')
    podman["put"](HOSTS[1], APT_HISTORY, APT.replace("python3-requests:amd64", "python3-requests-toolbelt:amd64"))
    os.remove(str(podman["root"] / HOSTS[2] / APT_HISTORY.lstrip("/")))
    podman["image"]("python3-requests\t2.28.1+dfsg-1\n", "dpkg-query: no packages found matching python3-venv\n", 1)
    rc, fig, err = run_main(install_check, argv, capsys)
    assert rc == 0, err
    assert fig["hosts"][HOSTS[0]]["help_calls"] == 3
    assert fig["hosts"][HOSTS[1]]["help_calls"] == 2 and fig["hosts"][HOSTS[1]]["help_calls_unreadable"] == 1
    assert "python3-requests" not in fig["hosts"][HOSTS[1]]["apt_installed"]
    assert fig["hosts"][HOSTS[2]]["apt_installed"] == []
    assert fig["image_installed"] == ["python3-requests"]


def test_a_host_podman_cannot_reach_or_an_image_not_named_fails(tmp_path, podman, capsys):
    build = _executable(tmp_path / "build-image", "#!/bin/sh\necho localhost/x:1\n")
    argv = ["--hosts", "gpufleet-mol-9", "--help-calls", HELP_CALLS, "--apt-history", APT_HISTORY,
            "--build-image", build, "--packages", "python3-requests", "--podman", podman["exe"]]
    rc, _fig, err = run_main(install_check, argv, capsys)
    assert rc == 1 and "gpufleet-mol-9" in err
    podman["put"](HOSTS[0], APT_HISTORY, APT)
    silent = _executable(tmp_path / "silent", "#!/bin/sh\nexit 0\n")
    argv[1], argv[7] = HOSTS[0], silent
    rc, _fig, err = run_main(install_check, argv, capsys)
    assert rc == 1 and "no image named" in err
    # without the --help record: null, which the assertion (2 records) refuses
    podman["image"]("", "dpkg-query: no packages found matching python3-requests\n", 1)
    argv[7] = build
    rc, fig, err = run_main(install_check, argv, capsys)
    assert rc == 0 and fig["hosts"][HOSTS[0]]["help_calls"] is None


# --- the shared reading of a nested run ------------------------------------------------------

def test_messages_keep_escaped_quotes_and_newlines_and_skip_the_error_block():
    msg = 'unhealthy or drifted: 1 of 3 hosts\ngpufleet-mol-1: drift: "a quote"'
    out = error_block(msg) + fatal(HOSTS[0], msg) + ok_debug(HOSTS[1], "plain")
    assert nested.messages(out) == [msg, "plain"]
    assert nested.plays(banner("PLAY", "Roll out") + banner("PLAY RECAP")) == {"Roll out": 1}
