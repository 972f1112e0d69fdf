"""What one run of the router scenario saw, as one JSON object (issue 47: the checks that
parsed outputs in Jinja and awk, in one script with unit tests).

``load``: reads the load clients' files ``<work>/<run>-<router>.json`` (tests/loadgen) and
prints ``{load: {requests, failed, truncated, lost, long}, by_router: {router: summary},
records: the first 10 incomplete records}`` (a run through a stopped router has thousands
of them; printing them all took 170 s).

``deploy``: the same, plus what the nested deploy printed and what the first router's
process cost during it:

* ``rc``; ``stdout``: the deploy's output with every run of blanks made one space (the
  assertions look for phrases in it);
* ``switch``: its ``ROUTER-SWITCH <host> out= drain= switch= restart= readd=`` lines;
  ``restart_s`` each line's ``restart=`` and ``drain_busy`` each line's ``busy=``;
* from two readings of the router's process (``--cpu-before``/``--cpu-after``: files holding
  the MainPID, then ``/proc/<pid>/stat``, then ``/proc/<pid>/status``): ``router_cpu_s``
  (utime+stime at 100 Hz), ``router_same_process``, ``router_peak_rss_mib`` (VmHWM) and
  ``router_threads``.
"""

import argparse
import json
import os
import re
import sys

BLANKS = re.compile(r"[ \t\n]+")
SWITCH = re.compile(r"ROUTER-SWITCH [^ ]+ out=[^ ]+ drain=[^ ]+ switch=[^ ]+ restart=([^ ]+) readd=[0-9.]+")
BUSY = re.compile(r"ROUTER-SWITCH [^ ]+ (?:[a-z]+=[0-9.]+ |held )+busy=([0-9]+)")
CLOCK_TICKS = 100
RECORDS_KEPT = 10


class Unreadable(Exception):
    """An input that is not what the run writes."""


def load_outcome(work, run, routers):
    docs = []
    for router in routers:
        path = os.path.join(work, "%s-%s.json" % (run, router))
        try:
            with open(path, encoding="utf-8") as handle:
                docs.append(json.load(handle))
        except (OSError, ValueError) as exc:
            raise Unreadable("%s: %s" % (path, exc)) from exc
    by_router = {router: doc["summary"] for router, doc in zip(routers, docs)}
    try:
        total = {key: sum(summary[key] for summary in by_router.values())
                 for key in ("requests", "failed", "truncated", "lost")}
    except KeyError as exc:
        raise Unreadable("a client's summary has no %s" % exc) from exc
    total["long"] = sum(summary.get("long", 0) for summary in by_router.values())
    incomplete = [rec for doc in docs for rec in doc.get("records", []) if not rec.get("complete")]
    return {"load": total, "by_router": by_router, "records": incomplete[:RECORDS_KEPT]}


def process_reading(text):
    """``(pid, cpu ticks, VmHWM kB, VmRSS kB, threads)`` from the MainPID line, the
    process's stat line and its status file."""
    lines = text.splitlines()
    if len(lines) < 2 or not lines[0].strip().isdigit():
        raise Unreadable("no MainPID line then /proc/<pid>/stat: %r" % text[:200])
    pid = int(lines[0])
    stat = lines[1]
    # the command name (field 2) is in parentheses and may hold blanks: fields count from
    # the last ')'
    fields = stat[stat.rindex(")") + 2:].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    status = {}
    for line in lines[2:]:
        key, _sep, value = line.partition(":")
        status[key.strip()] = value.split()
    try:
        return pid, utime + stime, int(status["VmHWM"][0]), int(status["VmRSS"][0]), int(status["Threads"][0])
    except (KeyError, IndexError, ValueError) as exc:
        raise Unreadable("no VmHWM, VmRSS or Threads in the status file: %s" % exc) from exc


def deploy_outcome(output, rc, before, after):
    flat = BLANKS.sub(" ", output)
    switches = list(SWITCH.finditer(flat))
    pid0, ticks0, _hwm0, _rss0, _threads0 = process_reading(before)
    pid1, ticks1, hwm1, _rss1, threads1 = process_reading(after)
    return {
        "rc": rc,
        "stdout": flat,
        "switch": [m.group(0) for m in switches],
        "restart_s": [float(m.group(1)) for m in switches],
        "drain_busy": [int(m.group(1)) for m in BUSY.finditer(flat)],
        "router_cpu_s": (ticks1 - ticks0) / CLOCK_TICKS,
        "router_same_process": pid0 == pid1,
        "router_peak_rss_mib": hwm1 / 1024,
        "router_threads": threads1,
    }


def _read(path):
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    sub = parser.add_subparsers(dest="what", required=True)
    for name in ("load", "deploy"):
        one = sub.add_parser(name)
        one.add_argument("--work", required=True)
        one.add_argument("--run", required=True)
        one.add_argument("--router", action="append", required=True)
        if name == "deploy":
            one.add_argument("--output", required=True, help="the deploy's stdout and stderr")
            one.add_argument("--rc", type=int, required=True)
            one.add_argument("--cpu-before", required=True)
            one.add_argument("--cpu-after", required=True)
    args = parser.parse_args(argv)
    try:
        outcome = load_outcome(args.work, args.run, args.router)
        if args.what == "deploy":
            outcome.update(deploy_outcome(_read(args.output), args.rc, _read(args.cpu_before),
                                          _read(args.cpu_after)))
    except (Unreadable, OSError) as exc:
        print("run_outcome: %s" % exc, file=sys.stderr)
        return 1
    json.dump(outcome, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
