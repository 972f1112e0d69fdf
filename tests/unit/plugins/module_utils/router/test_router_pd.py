"""The router in PD mode: its command line against the real --help texts of smg 1.13.0 and
sglang-router 0.3.2 (tests/fixtures/router-help/), and the worker API bodies against smg
1.13.0's real GET /workers answer (tests/fixtures/smg/workers-pd-1.13.0.json: a PD router
started with two prefill servers, one with bootstrap port 18998 and one with none, and a
decode server, then a fourth server added with its URL alone, which smg lists as
``regular``)."""

import json
import os
import re

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router as r
from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router_pd as pd
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_help import (
    alias_index,
    parse_help,
)
from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES

HELP = os.path.join(FIXTURES, "router-help")


def help_text(name):
    with open(os.path.join(HELP, name + ".txt"), encoding="utf-8") as fh:
        return fh.read()


def flags(name):
    return set(alias_index(parse_help(help_text(name))["flags"]))


SMG = ("smg", "1.13.0")
OLD = ("sglang-router", "0.3.2")

WORKERS = [
    {"host": "p1", "url": "http://10.0.0.1:30000/", "role": "prefill", "bootstrap_port": 8998},
    {"host": "p2", "url": "http://10.0.0.2:30000", "role": "prefill", "bootstrap_port": "none"},
    {"host": "d1", "url": "http://10.0.0.3:30000", "role": "decode"},
    {"host": "d2", "url": "http://10.0.0.4:30000", "role": "decode", "bootstrap_port": 9999},
]

SETTINGS = {"prefill_policy": "auto", "decode_policy": "auto", "prefill_max_inflight": 0,
            "prefill_queue_size": 100, "prefill_queue_timeout": 60, "own_key_urls": []}

BASE = {
    "host": "0.0.0.0", "port": 30000, "policy": "cache_aware", "prometheus_host": "127.0.0.1",
    "prometheus_port": 29000, "health_check_interval": 10, "health_check_timeout": 5,
    "health_failure_threshold": 3, "health_success_threshold": 2,
    "health_check_endpoint": "/health", "circuit_breaker": True, "cb_failure_threshold": 10,
    "cb_success_threshold": 3, "cb_timeout": 60, "cb_window": 120, "retries": 5,
    "request_timeout": 1800, "worker_startup_timeout": 600, "api_key": "", "hf_endpoint": "",
    "extra_args": [],
}


def args(workers=None, release=SMG, **settings):
    workers = WORKERS if workers is None else workers
    name = "%s-%s" % release
    return pd.launch_args(release[0], release[1], pd.normalize_workers(workers), flags(name),
                          help_text(name), dict(SETTINGS, **settings))


def options(argv):
    return [a for a in argv if a.startswith("--")]


# ---- the workers ----

def test_normalize_workers_defaults_and_none():
    got = pd.normalize_workers(WORKERS)
    assert [(w["url"], w["role"], w["bootstrap_port"]) for w in got] == [
        ("http://10.0.0.1:30000", "prefill", 8998), ("http://10.0.0.2:30000", "prefill", None),
        ("http://10.0.0.3:30000", "decode", None), ("http://10.0.0.4:30000", "decode", None)]
    unset = pd.normalize_workers([{"url": "http://a:1", "role": "Prefill"},
                                  {"url": "http://b:1", "role": "decode"}])
    assert unset[0]["role"] == "prefill" and unset[0]["bootstrap_port"] == pd.DEFAULT_BOOTSTRAP_PORT
    assert pd.normalize_workers([]) == [] and pd.normalize_workers(None) == []


def test_normalize_workers_refuses_every_problem_at_once():
    bad = [{"host": "x", "url": "http://a:1", "role": "both"},
           {"host": "y", "url": "http://b:1", "role": "prefill", "bootstrap_port": 70000},
           {"host": "z", "url": "http://c:1/", "role": "decode"},
           {"host": "w", "url": "http://c:1", "role": "decode"},
           "http://d:1"]
    with pytest.raises(r.RouterError) as exc:
        pd.normalize_workers(bad)
    text = str(exc.value)
    assert "x: sglang_pd_role is 'both'" in text
    assert "y: the prefill server's bootstrap port is 70000" in text
    assert "z and w name the same worker URL http://c:1" in text
    assert "PD worker #5" in text


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_a_pd_fleet_needs_both_roles(role):
    only = [dict(w, role=role) for w in WORKERS[:2]]
    other = "decode" if role == "prefill" else "prefill"
    with pytest.raises(r.RouterError, match="have no %s server" % other):
        pd.normalize_workers(only)


def test_workers_from_roles():
    servers = ["p1", "d1", "d2", "rank1"]
    urls = {"p1": "http://10.0.0.1:30000", "d1": "http://10.0.0.3:30000",
            "d2": "http://10.0.0.4:30000"}  # rank1: a multi-node server's second host
    roles = {"p1": {"role": "prefill", "bootstrap_port": 9000}, "d1": {"role": "decode"},
             "d2": {"role": "decode"}, "rank1": {"role": "decode"}}
    got = pd.workers_from_roles(servers, urls, roles)
    assert [(w["host"], w["role"], w["bootstrap_port"]) for w in got] == [
        ("p1", "prefill", 9000), ("d1", "decode", None), ("d2", "decode", None)]
    # no role anywhere: the regular mode
    assert pd.workers_from_roles(servers, urls, {}) == []
    assert pd.workers_from_roles(servers, urls, {"p1": {"role": ""}}) == []


def test_workers_from_roles_refuses_a_mixed_group():
    urls = {"p1": "http://a:1", "d1": "http://b:1", "c1": "http://c:1", "c2": "http://d:1"}
    roles = {"p1": {"role": "prefill"}, "d1": {"role": "decode"}}
    with pytest.raises(r.RouterError, match="c1, c2 have no PD role"):
        pd.workers_from_roles(["p1", "d1", "c1", "c2"], urls, roles)


# ---- the command line ----

def test_every_rendered_flag_is_in_the_real_smg_help():
    argv = args(prefill_max_inflight=32, prefill_queue_size=32, prefill_queue_timeout=30)
    known = flags("smg-1.13.0")
    assert options(argv) and set(options(argv)) <= known
    assert argv[:1] == ["--pd-disaggregation"]
    assert argv[1:7] == ["--prefill", "http://10.0.0.1:30000", "8998",
                         "--prefill", "http://10.0.0.2:30000", "none"]
    assert argv[7:11] == ["--decode", "http://10.0.0.3:30000", "--decode", "http://10.0.0.4:30000"]
    assert argv[argv.index("--prefill-policy") + 1] == "cache_aware"
    assert argv[argv.index("--decode-policy") + 1] == "power_of_two"
    assert argv[-6:] == ["--prefill-max-inflight-requests-per-worker", "32",
                         "--prefill-queue-size", "32", "--prefill-queue-timeout-secs", "30"]


def test_sglang_router_0_3_2_renders_pd_without_admission():
    argv = args(release=OLD)
    assert set(options(argv)) <= flags("sglang-router-0.3.2")
    assert "--prefill-max-inflight-requests-per-worker" not in argv
    with pytest.raises(r.RouterError, match="sglang-router 0.3.2 has no prefill admission flags"):
        args(release=OLD, prefill_max_inflight=8)


def test_auto_decode_policy_follows_the_decode_count():
    one = [w for w in WORKERS if w["host"] != "d2"]
    argv = args(one)
    assert argv[argv.index("--decode-policy") + 1] == "round_robin"
    assert argv[argv.index("--prefill-policy") + 1] == "cache_aware"


def test_power_of_two_with_one_server_of_the_role_is_refused():
    one = [w for w in WORKERS if w["host"] != "d2"]
    with pytest.raises(r.RouterError, match=r"router_decode_policy is power_of_two, which the "
                       r"router refuses at start with fewer than 2 decode URLs .*it has 1"):
        args(one, decode_policy="power_of_two")
    single_prefill = [w for w in WORKERS if w["host"] != "p2"]
    with pytest.raises(r.RouterError, match="router_prefill_policy is power_of_two"):
        args(single_prefill, prefill_policy="power_of_two")
    argv = args(prefill_policy="power_of_two", decode_policy="power_of_two")
    assert argv.count("power_of_two") == 2


def test_policies_are_checked_against_the_release_choices():
    # smg's prefill has bucket, its decode does not (the real help's choices)
    assert "bucket" in pd.policy_choices(help_text("smg-1.13.0"), "--prefill-policy")
    assert "bucket" not in pd.policy_choices(help_text("smg-1.13.0"), "--decode-policy")
    argv = args(prefill_policy="bucket")
    assert argv[argv.index("--prefill-policy") + 1] == "bucket"
    with pytest.raises(r.RouterError, match=r"router_decode_policy is bucket; this release's "
                       r"--decode-policy takes random, round_robin"):
        args(decode_policy="bucket")
    with pytest.raises(r.RouterError, match="router_prefill_policy is least_load"):
        args(release=OLD, prefill_policy="least_load")
    assert pd.policy_choices("no such text", "--decode-policy") is None


def test_a_release_that_cannot_route_pd_is_refused():
    with pytest.raises(r.RouterError, match=r"sglang-router 0\.2\.1 cannot front PD servers"):
        pd.launch_args("sglang-router", "0.2.1", pd.normalize_workers(WORKERS),
                       flags("sglang-router-0.3.2"), help_text("sglang-router-0.3.2"), SETTINGS)
    # the control: the real help with its PD options taken out
    without = flags("smg-1.13.0") - {"--pd-disaggregation", "--decode"}
    with pytest.raises(r.RouterError, match="smg 1.13.0 cannot route in PD mode: its --help "
                       "has no --pd-disaggregation, --decode"):
        pd.launch_args("smg", "1.13.0", pd.normalize_workers(WORKERS), without,
                       help_text("smg-1.13.0"), SETTINGS)


def test_a_pd_server_with_its_own_key_is_refused():
    with pytest.raises(r.RouterError, match="d1 has a server_api_key"):
        args(own_key_urls=["http://10.0.0.3:30000/"])


def test_regular_mode_renders_nothing():
    assert pd.launch_args("smg", "1.13.0", [], flags("smg-1.13.0"), "", SETTINGS) == []


def test_launch_argv_in_pd_mode_has_no_worker_urls_and_no_policy():
    settings = dict(BASE, worker_urls=[w["url"] for w in WORKERS], pd_args=args())
    argv, env = r.launch_argv("smg", "/opt/v", flags("smg-1.13.0"), settings)
    assert "--worker-urls" not in argv and "--policy" not in argv
    assert "--pd-disaggregation" in argv and "--disable-tokenizer-autoload" in argv
    assert set(options(argv)) <= flags("smg-1.13.0")
    # the regular mode is as before
    regular = r.launch_argv("smg", "/opt/v", flags("smg-1.13.0"),
                            dict(BASE, worker_urls=["http://a:1"]))[0]
    assert "--worker-urls" in regular and "--policy" in regular
    assert "--pd-disaggregation" not in regular


# ---- the worker API ----

def test_payloads_carry_the_role_and_the_bootstrap_port():
    bodies = pd.payloads(pd.normalize_workers(WORKERS), {"http://10.0.0.3:30000/": "k"})
    assert bodies["http://10.0.0.1:30000"] == {"url": "http://10.0.0.1:30000",
                                               "worker_type": "prefill", "bootstrap_port": 8998}
    assert bodies["http://10.0.0.2:30000"] == {"url": "http://10.0.0.2:30000",
                                               "worker_type": "prefill"}
    assert bodies["http://10.0.0.3:30000"] == {"url": "http://10.0.0.3:30000",
                                               "worker_type": "decode", "api_key": "k"}
    assert "bootstrap_port" not in bodies["http://10.0.0.4:30000"]


def real_listing():
    with open(os.path.join(FIXTURES, "smg", "workers-pd-1.13.0.json"), encoding="utf-8") as fh:
        return json.load(fh)


def test_misregistered_finds_the_worker_added_without_its_role():
    listing = real_listing()
    inventory = pd.normalize_workers([
        {"url": "http://127.0.0.1:18001", "role": "prefill", "bootstrap_port": 18998},
        {"url": "http://127.0.0.1:18002", "role": "prefill", "bootstrap_port": "none"},
        {"url": "http://127.0.0.1:18011", "role": "decode"},
        {"url": "http://127.0.0.1:18012", "role": "decode"},
    ])
    got = pd.misregistered(listing, inventory)
    assert [(m["url"], m["listed"]["worker_type"]) for m in got] == [
        ("http://127.0.0.1:18012", "regular")]
    assert got[0]["id"] and got[0]["payload"] == {"url": "http://127.0.0.1:18012",
                                                  "worker_type": "decode"}
    # a bootstrap port that differs from the inventory's is found too
    moved = [dict(w, bootstrap_port=19000) if w["url"].endswith("18001") else w
             for w in inventory]
    found = pd.misregistered(listing, moved)
    assert sorted(m["url"] for m in found) == ["http://127.0.0.1:18001", "http://127.0.0.1:18012"]
    assert [m["payload"].get("bootstrap_port") for m in found
            if m["url"].endswith("18001")] == [19000]
    # every listed worker as the inventory says: nothing to put right
    listed = [{"url": w["url"], "role": w["worker_type"], "bootstrap_port": w.get("bootstrap_port")
               or "none"} for w in listing["workers"] if w["worker_type"] != "regular"]
    assert pd.misregistered(listing, pd.normalize_workers(listed)) == []


# ---- the bodies router_worker's payloads carry (issue 43, design section 2) ----

@pytest.mark.parametrize("payloads,checked", [
    ({}, {}),
    ({"http://a:1/": {"url": "http://a:1", "worker_type": "Prefill", "bootstrap_port": "8998"}},
     {"http://a:1": {"url": "http://a:1", "worker_type": "prefill", "bootstrap_port": 8998}}),
    ({"http://a:1": {"worker_type": "prefill", "bootstrap_port": "none"}},
     {"http://a:1": {"url": "http://a:1", "worker_type": "prefill"}}),
    ({"http://b:1": {"url": "http://b:1/", "worker_type": "decode", "labels": {"x": "y"}}},
     {"http://b:1": {"url": "http://b:1", "worker_type": "decode", "labels": {"x": "y"}}}),
])
def test_check_payloads_normalizes_the_bodies(payloads, checked):
    assert pd.check_payloads(payloads) == checked


@pytest.mark.parametrize("payloads,message", [
    ({"http://a:1": "decode"}, "the PD payload of http://a:1 is 'decode'; expected a mapping"),
    ({"http://a:1": {"worker_type": "regular"}}, "has worker_type 'regular'; expected prefill or decode"),
    ({"http://a:1": {"url": "http://b:1"}}, "the PD payload of http://a:1 names another url, http://b:1"),
    ({"http://a:1": {"worker_type": "decode", "bootstrap_port": 8998}},
     "gives a bootstrap_port to a decode worker"),
    ({"http://a:1": {"worker_type": "prefill", "bootstrap_port": 70000}},
     "http://a:1: the prefill server's bootstrap port is 70000"),
    ({"http://a:1": {"worker_type": "decode"}, "http://a:1/": {"worker_type": "decode"}},
     "the PD payloads name http://a:1 twice"),
])
def test_check_payloads_refuses_a_body_that_names_no_role_or_a_wrong_port(payloads, message):
    with pytest.raises(r.RouterError, match=re.escape(message)):
        pd.check_payloads(payloads)


def test_misregistered_rows_over_the_routers_table():
    """The rows of r.worker_table (smg 1.13.0's real answer) against the bodies: the worker
    added with its URL alone, with its whole body (a key too: PUT replaces all of it); a
    row on its way out and a URL without a body are left alone."""
    rows = r.worker_table("workers", real_listing())
    bodies = pd.check_payloads({
        "http://127.0.0.1:18001": {"worker_type": "prefill", "bootstrap_port": 18998},
        "http://127.0.0.1:18002": {"worker_type": "prefill"},
        "http://127.0.0.1:18012": {"worker_type": "decode", "api_key": "k"},
    })
    got = pd.misregistered_rows(rows, bodies)
    assert [(m["url"], m["listed"], m["payload"]) for m in got] == [(
        "http://127.0.0.1:18012", {"worker_type": "regular", "bootstrap_port": None},
        {"url": "http://127.0.0.1:18012", "worker_type": "decode", "api_key": "k"})]
    assert got[0]["id"] == "01a25088-2ce7-739d-9142-f68e857bbef8"
    draining = [dict(x, status="draining") if x["url"].endswith("18012") else x for x in rows]
    assert pd.misregistered_rows(draining, bodies) == []
    # the bootstrap port counts: 18002 listed without one, its body gives one
    moved = dict(bodies, **pd.check_payloads(
        {"http://127.0.0.1:18002": {"worker_type": "prefill", "bootstrap_port": 8998}}))
    assert [m["url"] for m in pd.misregistered_rows(rows, moved)] == [
        "http://127.0.0.1:18002", "http://127.0.0.1:18012"]
