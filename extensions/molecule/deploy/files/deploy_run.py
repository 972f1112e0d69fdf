"""A nested deploy of the deploy scenario, run and read (issue 47: the Jinja regexes over a
nested deploy's output, the line splitting of the previous release's path and the decoding of
the slurped deployment records, in one script with unit tests, tests/unit/test_deploy_scenario_checks.py).

``deploy [options] -- ARGV``: runs ARGV (``ansible-playbook playbooks/deploy.yml ...``, see
_deploy_nested.py for what it prints; its output is copied to stderr) and prints one JSON object:

* ``rc``; ``changed``: a host's ``changed=`` in the PLAY RECAP is not 0; ``recap``;
  ``plays``: play name -> banners printed (``Roll out`` once per batch);
* ``counts``: ``--count PHRASE`` -> how often PHRASE occurs in the output;
* ``diff_added_flags``: the ``--flag [value]`` lines the ``--diff`` output adds (``+    --ep-size 8 \\``);
* ``not_ready``: each distinct ``not ready after N s: STATE; it was PHASE...`` of
  server_health's failure (``seconds``, ``state``, ``port_never_opened``, ``was``: the phase up
  to its first ``", "``, ``text``); ``rolled_back_to``: the strategies named by ``rolled back to
  the last known good server (<strategy>, SGLang ...)``;
* ``hosts``: for each host H of ``--hosts H1,H2``:

  - ``messages``: the debug messages that start with ``H: ``, in order;
  - ``report``: the role's last report line, ``H: <layout> on SGLang <release> at <url>,
    <outcome>`` (roles/server/tasks/rollout.yml), parsed, else null: ``layout``, ``release``,
    ``url``, ``action`` (``unchanged, no restart``, ``started``, ``restarted``, ``would
    restart (check mode)``), ``health`` (what follows ``restarted,``), ``unit`` (the unit
    step's summary in parentheses by kind: ``apply_pending``, ``pending``, ``reload``,
    ``enable``, ``restart``, each the directive names it lists, and ``comments``),
    ``unit_kinds`` (in order), ``unit_first``, ``unit_unknown`` (parts of no known kind),
    ``unit_summary``, ``unparsed`` (what follows the outcome and is no summary in
    parentheses), ``derived`` (after ``; the release derived: ``), ``line``;
  - with ``--phases P1,P2,...``: ``phases`` (the phases its messages start with, distinct,
    first seen first) and ``phases_in_order`` (in the order of ``--phases``);
    ``shard_readings`` and ``shard_totals`` (of ``loading weights D/T shards (P%)``);
    ``ready_steps`` (the phases its first ``ready after X: <phase> <time>, ...`` names);
  - with ``--records``: ``record_pending``, the ``pending`` of its deployment record
    (/etc/ansible/facts.d/sglang.fact, read after the run through ``podman exec``; exits 1
    when one cannot be read);

* ``tail``: the last ``--tail`` (60) lines of the output.

``previous --export CMD -- ARGV``: runs CMD (tests/testbed/previous-release; its last line of
stdout is the exported release's ANSIBLE_COLLECTIONS_PATH, the directory named by its commit),
then ARGV with that ANSIBLE_COLLECTIONS_PATH; prints ``{collections, commit, rc, tail}``; exits 1
when CMD fails or prints no path.
"""

import argparse
import os
import re
import sys

import _deploy_nested


REPORT = re.compile(r"^(?P<host>[^:\s]+): (?P<layout>\S+) on SGLang (?P<release>\S+) at (?P<url>\S+?), (?P<rest>.*)$",
                    re.S)
ACTIONS = (("would restart (check mode)", "would restart (check mode)"),
           ("restarted, ", "restarted"),
           ("unchanged, no restart", "unchanged, no restart"),
           ("started", "started"))
DERIVED = "; the release derived: "
# the unit step's summary (plugins/module_utils/rollout/_server_unit.py summary())
UNIT_KINDS = (("restart to apply pending: ", "apply_pending"),
              ("pending: applies at the next restart: ", "pending"),
              ("installed, takes effect at the daemon-reload of this run, no restart: ", "reload"),
              ("installed, read at the next systemctl enable, no restart: ", "enable"),
              ("restart: ", "restart"))
COMMENTS = "installed, comments only"
SHARDS = re.compile(r"loading weights (\d+)/(\d+) shards \((\d+)%\)")
READY = re.compile(r"ready after (\S+): (.*)$", re.S)
NOT_READY = re.compile(r"not ready after (\d+) s: ([^;\n]*); it was ([^\n]*)")
PORT_NEVER_OPENED = re.compile(r"port \d+ never opened$")
ROLLED_BACK = re.compile(r"rolled back to the last known good server \(([^,()]+), SGLang ")


def unit_summary(text):
    """The unit step's summary, by kind."""
    unit = dict((kind, []) for _prefix, kind in UNIT_KINDS)
    unit["comments"] = []
    kinds, unknown = [], []
    for part in text.split("; ") if text else []:
        if part == COMMENTS:
            kinds.append("comments")
            continue
        for prefix, kind in UNIT_KINDS:
            if part.startswith(prefix):
                names = part[len(prefix):]
                if kind == "restart":
                    if not names.endswith(" changed"):
                        continue
                    names = names[:-len(" changed")]
                unit[kind] = names.split(", ")
                kinds.append(kind)
                break
        else:
            unknown.append(part)
    return unit, kinds, unknown


def report(line):
    """The role's report line (roles/server/tasks/rollout.yml), parsed; None when it is not one."""
    match = REPORT.match(line)
    if not match:
        return None
    rest = match.group("rest").strip()
    derived = None
    at = rest.find(DERIVED)
    if at >= 0:
        rest, derived = rest[:at].strip(), rest[at + len(DERIVED):].strip()
    action, health, after = None, None, rest
    for prefix, name in ACTIONS:
        if rest.startswith(prefix):
            action, after = name, rest[len(prefix):]
            break
    if action == "restarted":
        # the health wait's summary (no parentheses in it) runs to the unit's summary
        at = after.find(" (")
        health, after = (after, "") if at < 0 else (after[:at], after[at:])
        health = health.strip()
    after = after.strip()
    summary, unparsed = None, None
    if after.startswith("(") and after.endswith(")"):
        summary = after[1:-1]
    elif after:
        unparsed = after
    unit, kinds, unknown = unit_summary(summary)
    return {"layout": match.group("layout"), "release": match.group("release"), "url": match.group("url"),
            "action": action, "health": health, "unit_summary": summary, "unit": unit, "unit_kinds": kinds,
            "unit_first": kinds[0] if kinds else None, "unit_unknown": unknown, "unparsed": unparsed,
            "derived": derived, "line": line}


def ready_steps(text):
    match = READY.match(text)
    if not match:
        return None
    return [step.rsplit(" ", 1)[0] for step in match.group(2).strip().split(", ")]


def host_figures(host, msgs, phases):
    prefix = host + ": "
    mine = [m for m in msgs if m.startswith(prefix)]
    reports = [r for r in (report(m) for m in mine) if r]
    seen = []
    for text in (m[len(prefix):] for m in mine):
        for phase in phases:
            if text.startswith(phase):
                if phase not in seen:
                    seen.append(phase)
                break
    shards = [m.groups() for text in mine for m in SHARDS.finditer(text)]
    totals = []
    for _done, total, _percent in shards:
        if int(total) not in totals:
            totals.append(int(total))
    steps = [s for s in (ready_steps(m[len(prefix):]) for m in mine) if s]
    return {"messages": mine, "report": reports[-1] if reports else None,
            "phases": seen, "phases_in_order": seen == [p for p in phases if p in seen],
            "shard_readings": len(shards), "shard_totals": totals,
            "ready_steps": steps[0] if steps else None}


def diff_added_flags(output):
    out = []
    for line in output.splitlines():
        if not line.startswith("+") or line.startswith("+++"):
            continue
        text = line[1:].strip()
        if text.endswith("\\"):
            text = text[:-1].strip()
        if text.startswith("--") and text not in out:
            out.append(text)
    return out


def not_ready(msgs):
    out, texts = [], []
    for msg in msgs:
        for match in NOT_READY.finditer(msg):
            seconds, state, was = int(match.group(1)), match.group(2).strip(), match.group(3).split(", ")[0].strip()
            text = "not ready after %d s: %s; it was %s" % (seconds, state, was)
            if text not in texts:
                texts.append(text)
                out.append({"seconds": seconds, "state": state, "was": was, "text": text,
                            "port_never_opened": bool(PORT_NEVER_OPENED.match(state))})
    return out


def figures(output, rc, hosts, phases=(), counts=(), lines=60):
    msgs = _deploy_nested.messages(output)
    rolled = []
    for msg in msgs:
        for strategy in ROLLED_BACK.findall(msg):
            if strategy not in rolled:
                rolled.append(strategy)
    recap = _deploy_nested.recap(output)
    return {
        "rc": rc,
        "changed": any(r["changed"] > 0 for r in recap.values()),
        "recap": recap,
        "plays": _deploy_nested.plays(output),
        "counts": dict((phrase, output.count(phrase)) for phrase in counts),
        "diff_added_flags": diff_added_flags(output),
        "not_ready": not_ready(msgs),
        "rolled_back_to": rolled,
        "hosts": dict((h, host_figures(h, msgs, list(phases))) for h in hosts),
        "tail": _deploy_nested.tail(output, lines),
    }


def deploy(args):
    rc, out, _err = _deploy_nested.run(args.argv)
    hosts = _deploy_nested.host_list(args.hosts)
    fig = figures(out, rc, hosts, _deploy_nested.host_list(args.phases), args.count, args.tail)
    if args.records:
        for host in hosts:
            fig["hosts"][host]["record_pending"] = _deploy_nested.record_pending(host, args.podman)
    return fig


def previous(args):
    rc, out, _err = _deploy_nested.run([args.export])
    lines = [line for line in out.splitlines() if line.strip()]
    if rc != 0 or not lines:
        raise _deploy_nested.Unreadable("%s: rc %d, %d lines of output" % (args.export, rc, len(lines)))
    path = lines[-1].strip()
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=path)
    rc, out, _err = _deploy_nested.run(args.argv, env=env)
    return {"collections": path, "commit": os.path.basename(path.rstrip("/")), "rc": rc,
            "tail": _deploy_nested.tail(out, args.tail)}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print("deploy_run: no -- before the command", file=sys.stderr)
        return 2
    at = argv.index("--")
    own, command = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    sub = parser.add_subparsers(dest="what", required=True)
    one = sub.add_parser("deploy")
    one.add_argument("--hosts", default="")
    one.add_argument("--phases", default="")
    one.add_argument("--count", action="append", default=[])
    one.add_argument("--records", action="store_true")
    one.add_argument("--podman", default="podman")
    one.add_argument("--tail", type=int, default=60)
    two = sub.add_parser("previous")
    two.add_argument("--export", required=True)
    two.add_argument("--tail", type=int, default=60)
    args = parser.parse_args(own)
    if not command:
        print("deploy_run: no command after --", file=sys.stderr)
        return 2
    args.argv = command
    return _deploy_nested.answer("deploy_run %s" % args.what, lambda: (deploy if args.what == "deploy" else previous)(args))


if __name__ == "__main__":
    sys.exit(main())
