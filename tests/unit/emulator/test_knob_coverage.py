"""Every flag the tune could search on a release (its ``--help`` flags less the strategy's,
the deploy path's and the deprecated ones, as ``tune/space.py`` refuses them) either has a
mechanism in the emulator's speed or memory model, under that release's name, or is listed
as having no effect in ``tests/emulator/README.md`` ("Knobs: mechanism or no effect")."""

import os
import re

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _sglang_help
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import space
from ansible_collections.gpufleet.sglang.tests.paths import SGLANG_HELP as HELP
from test_emulator import EMU, RELEASES

README = os.path.join(EMU, "README.md")
SECTION = "## Knobs: mechanism or no effect"


def searchable(release):
    """Flags of the release's --help the tune space accepts as knobs (canonical names)."""
    with open(os.path.join(HELP, "sglang-%s.txt" % release), encoding="utf-8") as fh:
        flags = _sglang_help.parse_help(fh.read())["flags"]
    out = set()
    for key, spec in flags.items():
        names = set([key] + list(spec.get("names") or []))
        if names & set(space.STRATEGY_FLAGS + space.OWNED_FLAGS) or spec.get("deprecated"):
            continue
        if key in ("-h", "--help"):
            continue
        out.add(key)
    return out


def readme_lists():
    """release -> {"mechanism": set, "no effect": set} from the README's section."""
    with open(README, encoding="utf-8") as fh:
        text = fh.read()
    assert SECTION in text
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    lists = {}
    for match in re.finditer(r"^(mechanism|no effect) \(([0-9a-z.]+)\):(.*?)(?=^(?:mechanism|no effect) \(|^### |\Z)", section,
                             re.M | re.S):
        kind, release, body = match.groups()
        lists.setdefault(release, {})[kind] = set(re.findall(r"`(--[a-z0-9-]+)`", body))
    return lists


@pytest.mark.parametrize("release", RELEASES)
def test_each_searchable_flag_has_a_mechanism_or_is_listed_as_no_effect(release):
    lists = readme_lists()[release]
    flags = searchable(release)
    assert lists["mechanism"] <= flags, lists["mechanism"] - flags
    assert not lists["mechanism"] & lists["no effect"]
    assert lists["mechanism"] | lists["no effect"] == flags, (
        sorted(flags - lists["mechanism"] - lists["no effect"]),
        sorted((lists["mechanism"] | lists["no effect"]) - flags))


def test_the_decode_graph_flags_are_each_release_s_own():
    lists = readme_lists()
    assert "--cuda-graph-max-bs" in lists["0.5.9"]["mechanism"]
    assert "--cuda-graph-max-bs-decode" in lists["0.5.23"]["mechanism"]
    assert "--cuda-graph-max-bs" not in searchable("0.5.23")
