"""tests/real/drift.py: the real-release stage's comparisons (issue 27)."""

import copy
import importlib.util
import json
import os

from ansible_collections.gpufleet.sglang.tests.paths import ROOT
_SPEC = importlib.util.spec_from_file_location("gpufleet_real_drift", os.path.join(ROOT, "tests", "real", "drift.py"))
drift = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(drift)

FIXTURE = drift.load_fixture()
REAL = FIXTURE["releases"]["0.5.23"]["kimi-k2.5"]
with open(os.path.join(drift.HELP_DIR, "sglang-0.5.23-cols200.txt"), encoding="utf-8") as _fh:
    HELP = _fh.read()


def _data(**changes):
    data = {"help": {"real": HELP, "emulator": HELP},
            "gate": {"real": {c: copy.deepcopy(REAL[c]) for c in drift.CASES},
                     "emulator": {c: copy.deepcopy(REAL[c]) for c in drift.CASES}},
            "failure": {"phase": "starting", "error": "RuntimeError: no GPU"},
            "emulator_failure": {"phase": "starting", "error": "RuntimeError: no GPU"},
            "figures": {}}
    data.update(changes)
    return data


def test_the_requests_render_the_fixtures_argv():
    reqs = drift.requests("0.5.23", os.path.join(ROOT, FIXTURE["model_dirs"]["kimi-k2.5"]))
    assert sorted(reqs) == sorted(drift.CASES)
    for case, text in reqs.items():
        argv = [os.path.relpath(a, ROOT) if a.startswith(ROOT) else a for a in json.loads(text)["argv"]]
        assert argv == REAL[case]["argv"], case
        assert json.loads(text)["gpu"]["count"] == FIXTURE["gpu"]["count"]


def test_equal_answers_make_an_empty_report():
    report = drift.build_report("0.5.23", _data(), FIXTURE, HELP, {})
    assert report["fixture"] == [] and report["drift"] == [] and report["ok"]


def test_a_derived_value_warning_or_verdict_that_differs_is_named():
    data = _data()
    data["gate"]["emulator"]["tp8"]["derived"]["attention_backend"] = "fa3"
    data["gate"]["emulator"]["pp8"]["warnings"] = []
    data["gate"]["real"]["ep4"]["verdict"] = "refused"
    report = drift.build_report("0.5.23", data, FIXTURE, HELP, {})
    keys = [e["key"] for e in report["drift"]]
    assert "0.5.23 gate tp8 derived.attention_backend" in keys
    assert ("0.5.23 gate pp8 warnings" in keys) == bool(REAL["pp8"]["warnings"])
    assert "0.5.23 gate ep4 real-vs-fixture verdict" in [e["key"] for e in report["fixture"]]
    assert not report["ok"]


def test_a_help_text_or_flag_that_differs_is_named():
    emulated = HELP.replace("--tp-size", "--tpx-size")
    diffs = dict((w, (a, b)) for w, a, b in drift.compare_help(HELP, emulated))
    assert "flag --tp-size" in diffs and "flag --tpx-size" in diffs
    assert "text" in diffs
    assert drift.compare_help(HELP, HELP) == []


def test_a_drift_listed_with_a_reason_passes_and_one_without_fails():
    data = _data(emulator_failure={"phase": "ready", "error": None})
    readme = ("# x\n\n## Drift from the real release\n\n| difference | reason |\n|---|---|\n"
              "| `0.5.23 failure phase` | the emulator emulates a GPU host |\n"
              "| `0.5.23 failure error` | |\n\n## Next\n| `0.5.23 failure error` | elsewhere |\n")
    reasons = drift.explained(readme)
    assert reasons == {"0.5.23 failure phase": "the emulator emulates a GPU host"}
    report = drift.build_report("0.5.23", data, FIXTURE, HELP, reasons)
    assert report["unexplained"] == ["0.5.23 failure error"]
    assert not report["ok"]
    reasons["0.5.23 failure *"] = "both"
    assert drift.build_report("0.5.23", data, FIXTURE, HELP, reasons)["ok"]


def test_the_emulator_readme_lists_its_known_drift_with_reasons():
    with open(drift.README, encoding="utf-8") as fh:
        reasons = drift.explained(fh.read())
    assert reasons, "tests/emulator/README.md has no '%s' table" % drift.SECTION
    assert all(len(r) > 20 for r in reasons.values())


def test_a_venv_larger_than_the_measured_size_asks_for_a_new_number():
    from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _venv
    known = _venv.VENV_MIB["0.5.23"]
    ok = drift.build_report("0.5.23", _data(figures={"venv_mib": known}), FIXTURE, HELP, {})
    assert ok["fixture"] == []
    grown = drift.build_report("0.5.23", _data(figures={"venv_mib": int(known * 1.2)}), FIXTURE, HELP, {})
    assert [e["key"] for e in grown["fixture"]] == ["0.5.23 venv size"]
