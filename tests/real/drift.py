"""The real-release stage's controller side (issue 27, ``scripts/test real``).

Two commands, run by ``extensions/molecule/real-release/verify.yml`` on the controller:

``requests``
    The server-args gate's requests for the layouts compared with the fixture (tp8, pp8,
    ep8, ep4 and tp8-dp8, the DP-attention layout), rendered exactly as
    ``tests/fixtures/server-args/capture.py`` rendered the fixture's argv, with the model
    directory the host has. One JSON object, case -> request.

``report``
    Reads what the host answered (``--help`` of the real package and of the emulator, the
    gate's answers of both, the real server's failure, the figures) from a directory and
    writes ``drift-<release>.json`` and ``drift-<release>.md`` there:

    * ``fixture``: where the real package on the host differs from the fixtures it is
      supposed to equal (the help text of ``tests/fixtures/sglang-help/``, the verdicts,
      derived values and warnings of ``tests/fixtures/server-args/server-args.json``).
      Any entry fails the stage.
    * ``drift``: where the emulator differs from the real package (help text, verdicts,
      derived values, warnings, the failure's phase and text). An entry fails the stage
      unless ``tests/emulator/README.md`` lists it, with a reason, in its table under
      "Drift from the real release".

    Exits 1 when anything fails, naming each entry.
"""

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, ".cache", "collections"))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures", "server-args"))

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _server_args_gate as gate  # noqa: E402
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _venv  # noqa: E402
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_help import parse_help  # noqa: E402

#: The layouts of the issue: tp8, pp8, ep8, ep4 and one with DP attention.
CASES = ("tp8", "pp8", "ep8", "ep4", "tp8-dp8")
MODEL = "kimi-k2.5"
FIXTURE_PATH = os.path.join(ROOT, "tests", "fixtures", "server-args", "server-args.json")
HELP_DIR = os.path.join(ROOT, "tests", "fixtures", "sglang-help")
README = os.path.join(ROOT, "tests", "emulator", "README.md")
SECTION = "## Drift from the real release"


def load_fixture():
    with open(FIXTURE_PATH, encoding="utf-8") as handle:
        return json.load(handle)


def requests(release, model_dir):
    """case -> the gate's JSON request, argv rendered as the fixture's was."""
    import capture  # tests/fixtures/server-args/capture.py: the fixture's own rendering
    fixture = load_fixture()
    out = {}
    for case in CASES:
        strategy, multinode, extra = capture.CASES[case]
        argv = capture.argv_for(release, model_dir, strategy, multinode, extra)
        out[case] = gate.request(argv, fixture["gpu"])
    return out


# ------------------------------------------------------------------ comparisons (pure)


def _warning_keys(answer):
    return sorted("%s | %s" % (w.get("where"), w.get("msg")) for w in answer.get("warnings") or [])


def compare_gate(expected, got, keys=None):
    """Differences of two gate answers: ``[(what, expected, got)]``.

    ``what`` is ``verdict``, ``error``, ``where``, ``derived.<key>`` or ``warnings``; only
    the derived keys both report are compared (``keys`` narrows them further).
    """
    diffs = []
    for field in ("verdict", "error", "where"):
        if expected.get(field) != got.get(field):
            diffs.append((field, expected.get(field), got.get(field)))
    want, have = expected.get("derived") or {}, got.get("derived") or {}
    for key in sorted(set(want) & set(have)):
        if keys is not None and key not in keys:
            continue
        if want[key] != have[key]:
            diffs.append(("derived." + key, want[key], have[key]))
    for key in sorted(set(want) ^ set(have)):
        if keys is None or key in keys:
            diffs.append(("derived." + key, want.get(key, "(not reported)"), have.get(key, "(not reported)")))
    if _warning_keys(expected) != _warning_keys(got):
        missing = sorted(set(_warning_keys(expected)) - set(_warning_keys(got)))
        extra = sorted(set(_warning_keys(got)) - set(_warning_keys(expected)))
        diffs.append(("warnings", missing, extra))
    return diffs


def compare_help(expected_text, got_text):
    """Differences of two ``--help`` texts: the flags (names, choices, defaults) and the text."""
    diffs = []
    want, have = parse_help(expected_text)["flags"], parse_help(got_text)["flags"]
    for flag in sorted(set(want) - set(have)):
        diffs.append(("flag " + flag, "present", "missing"))
    for flag in sorted(set(have) - set(want)):
        diffs.append(("flag " + flag, "missing", "present"))
    for flag in sorted(set(want) & set(have)):
        if want[flag] != have[flag]:
            diffs.append(("flag " + flag, want[flag], have[flag]))
    if expected_text != got_text:
        exp, got = expected_text.splitlines(), got_text.splitlines()
        first = next((i for i, (a, b) in enumerate(zip(exp, got)) if a != b), min(len(exp), len(got)))
        diffs.append(("text", "%d lines; line %d: %r" % (len(exp), first + 1, exp[first] if first < len(exp) else None),
                      "%d lines; line %d: %r" % (len(got), first + 1, got[first] if first < len(got) else None)))
    return diffs


def explained(readme_text):
    """The drift entries the emulator's README explains: ``{key: reason}``.

    Rows of the table under :data:`SECTION`: ``| key | reason |``; ``*`` in a key matches
    any text (a case, a flag).
    """
    found, inside = {}, False
    for line in readme_text.splitlines():
        if line.startswith("## "):
            inside = line.strip() == SECTION
            continue
        if not inside or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or set(cells[0]) <= set("-: ") or cells[0] == "difference":
            continue
        key, reason = cells[0].strip("`"), cells[1]
        if reason:
            found[key] = reason
    return found


def reason_for(key, reasons):
    for pattern, reason in reasons.items():
        rx = "^" + ".*".join(re.escape(p) for p in pattern.split("*")) + "$"
        if re.match(rx, key):
            return reason
    return None


def _entries(prefix, diffs):
    return [{"key": "%s %s" % (prefix, what), "expected": a, "got": b} for what, a, b in diffs]


def build_report(release, data, fixture, help_fixture, reasons):
    """The report: fixture differences (each fails) and drift entries (unexplained fail)."""
    report = {"release": release, "fixture": [], "drift": [], "figures": data.get("figures") or {}}
    report["fixture"] += _entries("%s help real-vs-fixture" % release,
                                  compare_help(help_fixture, data["help"]["real"]))
    probe = data.get("probe_flags")
    if probe is not None:
        want = parse_help(help_fixture)["flags"]
        report["fixture"] += [{"key": "%s probe real-vs-fixture flag %s" % (release, flag),
                               "expected": want.get(flag), "got": probe.get(flag)}
                              for flag in sorted(set(want) | set(probe)) if want.get(flag) != probe.get(flag)]
    report["drift"] += _entries("%s help" % release, compare_help(data["help"]["real"], data["help"]["emulator"]))
    ref = fixture["releases"][release][MODEL]
    for case in sorted(data["gate"]["real"]):
        real = data["gate"]["real"][case]
        report["fixture"] += _entries("%s gate %s real-vs-fixture" % (release, case),
                                      compare_gate(ref[case], real))
        report["drift"] += _entries("%s gate %s" % (release, case),
                                    compare_gate(real, data["gate"]["emulator"][case]))
    measured, known = report["figures"].get("venv_mib"), _venv.VENV_MIB.get(release)
    if measured is not None and (not known or measured > known * (1 + _venv.VENV_MIB_SLACK)):
        report["fixture"].append({"key": "%s venv size" % release, "expected": known, "got": measured})
    failure = data.get("failure") or {}
    emulated = data.get("emulator_failure") or {}
    for field in ("phase", "error"):
        if failure.get(field) != emulated.get(field):
            report["drift"].append({"key": "%s failure %s" % (release, field),
                                    "expected": failure.get(field), "got": emulated.get(field)})
    for entry in report["drift"]:
        entry["reason"] = reason_for(entry["key"], reasons)
    report["unexplained"] = [e["key"] for e in report["drift"] if not e["reason"]]
    report["ok"] = not report["fixture"] and not report["unexplained"]
    return report


def markdown(report):
    lines = ["# Emulator drift, SGLang %s" % report["release"], ""]
    lines.append("Real package vs fixtures: %d difference(s). Emulator vs real package: %d, "
                 "%d unexplained." % (len(report["fixture"]), len(report["drift"]), len(report["unexplained"])))
    lines += ["", "## Figures", ""] + ["- %s: %s" % kv for kv in sorted(report["figures"].items())]
    tables = (("Real package vs fixtures (each fails the stage)", "fixture", "real", report["fixture"]),
              ("Emulator vs real package", "real", "emulator", report["drift"]))
    for title, left, right, entries in tables:
        lines += ["", "## " + title, "", "| difference | %s | %s | reason |" % (left, right), "|---|---|---|---|"]
        for e in entries:
            reason = e.get("reason") or ("fails" if left == "fixture" else "**unexplained**")
            lines.append("| %s | %s | %s | %s |" % (e["key"], _cell(e["expected"]), _cell(e["got"]), reason))
    return "\n".join(lines) + "\n"


def _cell(value):
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("|", "\\|").replace("\n", " ")[:300]


#: A Python exception line of a traceback (``RuntimeError: ...``, ``torch.AcceleratorError: ...``).
EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit)(?:: .*)?$")
PHASE = re.compile(r"is not healthy: [^;]*; it was ([a-z][^,(;\\]*)")


def failure(deploy_output, journal):
    """What the real server's failed start looked like: the phase the health wait named,
    the last exception line of the journal, and whether the deploy output quotes it."""
    journal_lines = [ln.strip() for ln in journal.splitlines()]
    errors = [ln for ln in journal_lines if EXCEPTION_LINE.match(ln)]
    error = errors[-1] if errors else None
    phase = PHASE.search(deploy_output)
    return {"phase": phase.group(1).strip() if phase else None, "error": error,
            "errors": errors[-5:],
            "quoted": bool(error) and (error in deploy_output or json.dumps(error)[1:-1] in deploy_output)}


def _read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def load_answers(directory):
    """What verify.yml wrote: help-*.txt, gate-<python>-<case>.out, failure*.json, figures.json."""
    data = {"help": {}, "gate": {"real": {}, "emulator": {}}}
    for who in ("real", "emulator"):
        data["help"][who] = _read(os.path.join(directory, "help-%s.txt" % who))
        for case in CASES:
            data["gate"][who][case] = gate.parse_output(_read(os.path.join(directory, "gate-%s-%s.out" % (who, case))))
    for name in ("failure", "emulator_failure", "figures", "probe_flags"):
        path = os.path.join(directory, name + ".json")
        data[name] = json.loads(_read(path)) if os.path.exists(path) else None
    return data


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    sub = ap.add_subparsers(dest="command", required=True)
    req = sub.add_parser("requests")
    req.add_argument("--release", required=True)
    req.add_argument("--model-dir", required=True)
    fail = sub.add_parser("failure")
    fail.add_argument("--deploy", required=True)
    fail.add_argument("--journal", required=True)
    rep = sub.add_parser("report")
    rep.add_argument("--release", required=True)
    rep.add_argument("--dir", required=True)
    args = ap.parse_args(argv)
    if args.command == "requests":
        print(json.dumps({"code": gate.GATE_CODE, "requests": requests(args.release, args.model_dir)}))
        return 0
    if args.command == "failure":
        print(json.dumps(failure(_read(args.deploy), _read(args.journal))))
        return 0
    data = load_answers(args.dir)
    help_fixture = _read(os.path.join(HELP_DIR, "sglang-%s-cols200.txt" % args.release))
    report = build_report(args.release, data, load_fixture(), help_fixture, explained(_read(README)))
    with open(os.path.join(args.dir, "drift-%s.json" % args.release), "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1, sort_keys=True, default=str)
    text = markdown(report)
    with open(os.path.join(args.dir, "drift-%s.md" % args.release), "w", encoding="utf-8") as handle:
        handle.write(text)
    print(text)
    if not report["ok"]:
        print("FAILED: %d difference(s) from the fixtures, %d unexplained drift entr(ies): %s"
              % (len(report["fixture"]), len(report["unexplained"]),
                 "; ".join([e["key"] for e in report["fixture"]] + report["unexplained"])), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
