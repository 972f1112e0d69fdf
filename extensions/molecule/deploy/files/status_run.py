"""playbooks/status.yml run from the controller as cron or CI runs it, and read (issue 47: the
Jinja regexes over its printed table, the lookups and filter chains over its JSON report and
the decoding of the slurped deployment records, in one script with unit tests,
tests/unit/test_deploy_scenario_checks.py).

``status_run.py --json PATH [--records H1,H2] -- ARGV``: makes PATH's directory, removes a
report an earlier run left at PATH, runs ARGV (``ansible-playbook playbooks/status.yml ... -e
status_json=PATH``; see _deploy_nested.py for what it prints; its output is copied to stderr), then
reads the JSON report it wrote at PATH and prints one JSON object:

* ``rc``; ``report``: the report's ``ok``, ``failures``, ``missing`` and ``generated_at`` (null
  when it wrote none); ``report_hosts``: its rows' hosts, in order;
* ``table``: the fleet table it printed (the debug message that starts with ``HOST ``):
  ``columns`` (the header's titles), ``hosts`` (its rows' hosts, in order), ``missing`` (the
  hosts of its ``(no status)`` lines) and ``failures`` (the lines after its blank line); null
  when it printed none;
* ``printed_failures``: the lines under ``unhealthy or drifted: N of M hosts`` of its failure
  message (null when it did not fail so);
* ``hosts``: host -> ``row`` (the report's row), ``cells`` (the table's row: column -> cell, the
  cells cut at the header's column starts, DRIFT the rest of the line; null when absent),
  ``unlike_serving`` (the columns among RELEASE, PID, UPTIME and READY whose cell is not what a
  serving host shows: a version, a number, a duration such as ``1h2m``, ``yes``),
  ``deployed_at_iso`` (the row's ``deployed_at`` is a time ``YYYY-MM-DDTHH:MM:SS...``); with
  ``--records``, ``record_pending`` (the ``pending`` of the host's deployment record,
  /etc/ansible/facts.d/sglang.fact, read after the run through ``podman exec``; exits 1 when one
  cannot be read) and ``record_pending_cell`` (the PENDING cell the table shows for it: each
  directive without its section, joined by ``,``, else ``-``);
* ``tail``: the last ``--tail`` lines of the output (default 0: all of them).
"""

import argparse
import json
import os
import re
import sys

import _deploy_nested

FAILED = "unhealthy or drifted: "
NO_STATUS = "  (no status)"
SERVING = {"RELEASE": re.compile(r"[0-9]\S*"), "PID": re.compile(r"[0-9]+"),
           "UPTIME": re.compile(r"[0-9dhms]+"), "READY": re.compile(r"yes")}
ISO_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}")


def table(text):
    """``(columns, rows: [cells], missing, failures)`` of the printed fleet table."""
    lines = text.split("\n")
    header = lines[0]
    starts = [(m.group(0), m.start()) for m in re.finditer(r"\S+", header)]
    rows, missing, body = [], [], lines[1:]
    blank = body.index("") if "" in body else len(body)
    for line in body[:blank]:
        if line.endswith(NO_STATUS):
            missing.append(line[:-len(NO_STATUS)].strip())
            continue
        cells = {}
        for index, (title, start) in enumerate(starts):
            end = starts[index + 1][1] if index + 1 < len(starts) else None
            cells[title] = line[start:end].strip()
        rows.append(cells)
    failures = [line for line in body[blank + 1:] if line]
    return [title for title, _start in starts], rows, missing, failures


def unlike_serving(cells):
    return [title for title, form in sorted(SERVING.items())
            if title in cells and not form.fullmatch(cells[title])]


def pending_cell(pending):
    return ",".join(p.split(".", 1)[-1] for p in pending) or "-"


def figures(output, rc, report, lines=0):
    msgs = _deploy_nested.messages(output)
    printed = [m for m in msgs if m.startswith("HOST ")]
    columns, rows, table_missing, table_failures = table(printed[-1]) if printed else (None, [], None, None)
    failed = [m for m in msgs if m.startswith(FAILED)]
    by_cells = dict((cells.get("HOST"), cells) for cells in rows)
    report_rows = (report or {}).get("hosts") or []
    hosts = {}
    for row in report_rows:
        host = row.get("host")
        cells = by_cells.get(host)
        hosts[host] = {"row": row, "cells": cells, "unlike_serving": unlike_serving(cells) if cells else None,
                       "deployed_at_iso": bool(ISO_TIME.match(row.get("deployed_at") or ""))}
    for host, cells in by_cells.items():
        if host not in hosts:
            hosts[host] = {"row": None, "cells": cells, "unlike_serving": unlike_serving(cells),
                           "deployed_at_iso": False}
    return {
        "rc": rc,
        "report": None if report is None else dict(
            (key, report.get(key)) for key in ("ok", "failures", "missing", "generated_at")),
        "report_hosts": [row.get("host") for row in report_rows],
        "table": None if columns is None else {
            "columns": columns, "hosts": [cells.get("HOST") for cells in rows], "missing": table_missing,
            "failures": table_failures},
        "printed_failures": failed[-1].split("\n")[1:] if failed else None,
        "hosts": hosts,
        "tail": _deploy_nested.tail(output, lines),
    }


def read_report(path):
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except OSError:
        return None
    except ValueError as exc:
        raise _deploy_nested.Unreadable("%s: %s" % (path, exc)) from exc
    if not isinstance(doc, dict):
        raise _deploy_nested.Unreadable("%s holds %r" % (path, type(doc).__name__))
    return doc


def status(args):
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    if os.path.lexists(args.json):
        os.remove(args.json)
    rc, out, _err = _deploy_nested.run(args.argv)
    fig = figures(out, rc, read_report(args.json), args.tail)
    for host in _deploy_nested.host_list(args.records):
        pending = _deploy_nested.record_pending(host, args.podman)
        one = fig["hosts"].setdefault(host, {"row": None, "cells": None, "unlike_serving": None,
                                             "deployed_at_iso": False})
        one.update(record_pending=pending, record_pending_cell=pending_cell(pending))
    return fig


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print("status_run: no command after --", file=sys.stderr)
        return 2
    at = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--json", required=True, help="the report status.yml writes (status_json)")
    parser.add_argument("--records", default="", help="hosts whose deployment record to read")
    parser.add_argument("--podman", default="podman")
    parser.add_argument("--tail", type=int, default=0)
    args = parser.parse_args(argv[:at])
    args.argv = argv[at + 1:]
    return _deploy_nested.answer("status_run", lambda: status(args))


if __name__ == "__main__":
    sys.exit(main())
