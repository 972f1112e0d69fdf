"""What the test bed's emulated servers show, read from the controller in one step (issue 47:
tests/testbed/tasks/observe.yml's three tasks per host, and the ``wc -l``, the slurped
records and the Jinja that parsed what they read, with unit tests). The safety and gate
scenarios call it through tests/testbed/tasks/observe_fleet.yml.

``hosts --hosts H1,H2 --unit U --starts FILE --info-url URL [--count-lines FILE]
[--record FILE] [--deploy [--forbid-gpu-need S]]`` (on the controller) runs this script in
each container (``podman exec H python3 -c <this script> inside ...``, the hosts side by
side) and prints one JSON object:

- ``hosts``: H -> what it showed: ``starts`` (the lines of the emulator's start records
  FILE as ``cat``'s stdout_lines count them; 0 when FILE cannot be read), ``main_pid`` and
  ``n_restarts`` (``systemctl show`` of the unit U, integers; ``n_restarts`` null when
  systemd has none), ``server_status`` (the HTTP status of GET URL from inside the
  container, -1 when nothing answered) and ``server_info`` (its JSON object, else {});
  with --count-lines, ``lines`` (FILE's lines, as ``wc -l`` counts them); with --record,
  ``record`` (the deployment record FILE: ``verdict`` and ``disable_overlap_schedule``
  (``server_args.derived``), ``changes`` (what the release changed, in order),
  ``explicit`` (what -> how many of those changes the launch flags asked for), ``argv``
  and ``document``, the whole record).
- ``errors``: H -> why it could not be read (then it has no entry in ``hosts``).
- with --deploy, ``deploy``: figures of the deploy run given on stdin (``{rc, stdout,
  stderr}``, as tests/testbed/tasks/deploy_run.yml registers it): ``rc``,
  ``rolled_back`` (the stdout lines that say ``rolled back``), ``gpu_needs`` (X of each
  ``needs X GPUs``, X a count or the strategy check's ``tp*pp*dp = 8*1*8 = 64``) and
  ``gpu_needs_forbidden`` (those of them that hold S).

Exits 1 when a host could not be read: its start records may be missing (0), but the
unit's ``systemctl show``, --count-lines and --record must be readable.

``serving --ports P1,P2 [--timeout S]`` (on the controller): GET
``http://127.0.0.1:P/server_info`` of each published port; prints ``answers`` (P ->
``status``, ``ep_size``), ``statuses`` and ``ep_sizes`` (their distinct values, first seen
first).

``inside --unit U --starts FILE --info-url URL [--count-lines FILE] [--record FILE]`` (in a
container): prints that container's entry (the record as read), or ``{"error": ...}`` and
exits 1.
"""

import argparse
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

INFO_TIMEOUT = 30  # ansible.builtin.uri's default, which observe.yml used
PODMAN_TIMEOUT = 120


class Unreadable(Exception):
    """What a host's reading could not do."""


def unique(values):
    seen = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen


# --- inside a container ------------------------------------------------------------------------

def stdout_lines(text):
    """The lines ``cat FILE`` gives as ansible.builtin.command's stdout_lines (its stdout
    without the trailing newlines)."""
    return len(text.rstrip("\r\n").splitlines())


def count_starts(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return stdout_lines(handle.read())
    except OSError:
        return 0  # observe.yml's cat did not fail the task: no start recorded


def count_lines(path):
    """``wc -l``: the newlines of the file; raises Unreadable when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read().count(b"\n")
    except OSError as exc:
        raise Unreadable("wc -l %s: %s" % (path, exc)) from exc


def unit_properties(text):
    """``KEY=VALUE`` lines of ``systemctl show``, as a dict."""
    props = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props


def _int_or_none(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def systemctl_show(unit):
    done = subprocess.run(["systemctl", "show", "-p", "MainPID", "-p", "NRestarts", unit],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          check=False)
    if done.returncode != 0:
        raise Unreadable("systemctl show %s: rc %d: %s" % (unit, done.returncode, done.stderr.strip()))
    return done.stdout


def unit_figures(text, unit):
    props = unit_properties(text)
    main_pid = _int_or_none(props.get("MainPID"))
    if main_pid is None:
        raise Unreadable("systemctl show %s gave no MainPID: %r" % (unit, text[:300]))
    return {"main_pid": main_pid, "n_restarts": _int_or_none(props.get("NRestarts"))}


def fetch_json(url, timeout=INFO_TIMEOUT):
    """``(HTTP status, JSON object or {})`` of GET url, ``(-1, {})`` when nothing answered
    (as observe.yml's uri with failed_when false: status -1, no json). No proxy: loopback."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as resp:
            status, body = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except (urllib.error.URLError, OSError, ValueError):
        return -1, {}
    try:
        doc = json.loads(body.decode("utf-8", "replace"))
    except ValueError:
        doc = None
    return status, (doc if isinstance(doc, dict) else {})


def read_json_file(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise Unreadable("%s: %s" % (path, exc)) from exc


def inside(unit, starts, info_url, count=None, record=None, show=systemctl_show, fetch=fetch_json):
    """This container's entry (the record as read: the controller takes its figures)."""
    out = {"starts": count_starts(starts)}
    out.update(unit_figures(show(unit), unit))
    out["server_status"], out["server_info"] = fetch(info_url)
    if count:
        out["lines"] = count_lines(count)
    if record:
        out["record"] = read_json_file(record)
    return out


# --- on the controller -------------------------------------------------------------------------

def record_figures(doc):
    """What the asserts compare of a deployment record (``server_args``: the gate's summary,
    plugins/module_utils/prepare/_server_args_gate.summary)."""
    if not isinstance(doc, dict):
        raise Unreadable("the deployment record is not a JSON object: %r" % (doc,))
    args = doc.get("server_args") or {}
    changes = [c for c in args.get("changes") or [] if isinstance(c, dict)]
    explicit = {}
    for change in changes:
        if change.get("explicit"):
            explicit[change.get("what")] = explicit.get(change.get("what"), 0) + 1
    return {"verdict": args.get("verdict"),
            "disable_overlap_schedule": (args.get("derived") or {}).get("disable_overlap_schedule"),
            "changes": [c.get("what") for c in changes], "explicit": explicit,
            "argv": doc.get("argv") or [], "document": doc}


# X: a count (``needs 64 GPUs``: the capacity planner, the GPU check) or how the strategy check
# counted (``needs tp*pp*dp = 8*1*8 = 64 GPUs``); without the formula, the pattern the gate's
# Jinja had (``needs [^ ]+ GPUs``)
GPU_NEED = re.compile(r"needs ((?:[a-z]+(?:\*[a-z]+)* = [0-9]+(?:\*[0-9]+)* = )?[^ ]+) GPUs")


def deploy_figures(run, forbid=None):
    """Figures of a deploy run's output (``{rc, stdout, stderr}``)."""
    stdout = run.get("stdout") or ""
    needs = GPU_NEED.findall(stdout)
    return {"rc": run.get("rc"),
            "rolled_back": [line for line in stdout.splitlines() if re.search("rolled back", line)],
            "gpu_needs": needs,
            "gpu_needs_forbidden": [need for need in needs if forbid and forbid in need]}


def podman_inside(host, args, source):
    """Run this script's ``inside`` in container ``host``; its entry, or raises Unreadable."""
    try:
        done = subprocess.run(["podman", "exec", host, "python3", "-c", source, "inside"] + args,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=PODMAN_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unreadable("podman exec %s: %s" % (host, exc)) from exc
    try:
        entry = json.loads(done.stdout)
    except ValueError:
        entry = None
    if done.returncode != 0 or not isinstance(entry, dict) or "error" in entry:
        why = entry.get("error") if isinstance(entry, dict) else done.stdout[-300:]
        raise Unreadable("podman exec %s: rc %d: %s %s" % (host, done.returncode, why, done.stderr.strip()[-300:]))
    return entry


def observe(hosts, args, read):
    """``(hosts: H -> entry, errors: H -> why)``, the hosts read side by side."""
    def one(host):
        try:
            entry = read(host, args)
            if "record" in entry:
                entry["record"] = record_figures(entry["record"])
            return host, entry, None
        except Unreadable as exc:
            return host, None, str(exc)
    seen, errors = {}, {}
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        for host, entry, error in pool.map(one, hosts):
            if error is None:
                seen[host] = entry
            else:
                errors[host] = error
    return seen, errors


def serving(ports, fetch=fetch_json, timeout=5):
    answers = {}
    for port in ports:
        status, info = fetch("http://127.0.0.1:%s/server_info" % port, timeout)
        answers[str(port)] = {"status": status, "ep_size": info.get("ep_size")}
    return {"answers": answers,
            "statuses": unique(a["status"] for a in answers.values()),
            "ep_sizes": unique(a["ep_size"] for a in answers.values())}


def _source():
    with open(__file__, encoding="utf-8") as handle:
        return handle.read()


def _inside_args(args):
    out = ["--unit", args.unit, "--starts", args.starts, "--info-url", args.info_url]
    if args.count_lines:
        out += ["--count-lines", args.count_lines]
    if args.record:
        out += ["--record", args.record]
    return out


def _reading_args(parser):
    parser.add_argument("--unit", required=True, help="the server's unit, e.g. sglang.service")
    parser.add_argument("--starts", required=True, help="the emulator's start records (starts.jsonl)")
    parser.add_argument("--info-url", required=True, help="the server's /server_info, from inside the host")
    parser.add_argument("--count-lines", help="a file whose lines to count (wc -l)")
    parser.add_argument("--record", help="the deployment record (sglang.fact)")


def main(argv=None, stdin=None, read=None, fetch=fetch_json):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    sub = parser.add_subparsers(dest="what", required=True)
    one = sub.add_parser("hosts")
    one.add_argument("--hosts", required=True, help="the containers, comma-separated")
    _reading_args(one)
    one.add_argument("--deploy", action="store_true", help="read a deploy run ({rc, stdout, stderr}) on stdin")
    one.add_argument("--forbid-gpu-need")
    _reading_args(sub.add_parser("inside"))
    one = sub.add_parser("serving")
    one.add_argument("--ports", required=True, help="the published ports, comma-separated")
    one.add_argument("--timeout", type=float, default=5)
    args = parser.parse_args(argv)

    if args.what == "inside":
        try:
            entry = inside(args.unit, args.starts, args.info_url, args.count_lines, args.record, fetch=fetch)
        except Unreadable as exc:
            json.dump({"error": str(exc)}, sys.stdout)
            return 1
        json.dump(entry, sys.stdout)
        return 0
    if args.what == "serving":
        json.dump(serving(args.ports.split(","), fetch, args.timeout), sys.stdout)
        return 0

    out = {}
    if args.deploy:
        try:
            run = json.load(stdin or sys.stdin)
            out["deploy"] = deploy_figures(run, args.forbid_gpu_need)
        except (ValueError, AttributeError) as exc:
            print("observe: the deploy run on stdin is unreadable: %s" % exc, file=sys.stderr)
            return 1
    if read is None:
        source = _source()

        def read(host, inside_args):
            return podman_inside(host, inside_args, source)
    out["hosts"], out["errors"] = observe(args.hosts.split(","), _inside_args(args), read)
    json.dump(out, sys.stdout)
    if out["errors"]:
        print("observe: %s" % "; ".join("%s: %s" % kv for kv in sorted(out["errors"].items())), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
