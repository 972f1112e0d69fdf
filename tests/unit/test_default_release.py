# -*- coding: utf-8 -*-
"""The default SGLang release is one rule: the newest release the collection is tested
against. Every place that states it must agree: the roles' defaults and argument specs,
the README, the inputs module and the emulator's newest release."""

import os
import re

import yaml

from ansible_collections.gpufleet.sglang.plugins.module_utils.check._inputs import NEWEST_TESTED_RELEASE

from ansible_collections.gpufleet.sglang.tests.paths import ROOT
DEFAULTED = {
    "server": "server_release",
    "venv": "venv_release",
    "benchmark": "benchmark_release",
}


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as fh:
        return fh.read()


def _default_in(text):
    found = re.findall(r"sglang_release \| default\('([^']+)'\)", text)
    return set(found)


def test_role_defaults_and_specs_name_the_newest_tested_release():
    for role, var in DEFAULTED.items():
        defaults = yaml.safe_load(_read("roles", role, "defaults", "main.yml"))
        assert _default_in(defaults[var]) == {NEWEST_TESTED_RELEASE}, (role, defaults[var])
        specs = _read("roles", role, "meta", "argument_specs.yml")
        assert _default_in(specs) == {NEWEST_TESTED_RELEASE}, role


def test_the_planner_plans_for_it_when_no_release_is_named():
    assert _default_in(_read("playbooks", "plan.yml")) == {NEWEST_TESTED_RELEASE}


def test_the_emulator_emulates_it_as_its_newest_release():
    text = _read("tests", "emulator", "src", "sglang", "_emulator", "release.py")
    releases = re.search(r"RELEASES = \(([^)]*)\)", text).group(1)
    newest = [r.strip().strip('"') for r in releases.split(",") if r.strip()][-1]
    assert newest == NEWEST_TESTED_RELEASE


def test_the_readme_names_it_as_the_default():
    assert "default release is **%s**" % NEWEST_TESTED_RELEASE in _read("README.md")
