# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Once per site, then the LAN: who downloads from the Hub, and who pulls from whom.

Each site (the hosts that share a LAN) needs one copy from the Hub. If a host of the site
already holds a verified copy it is the source; otherwise the site's seed (its first host,
or the one marked seed) downloads. Then every round, each host that holds a verified copy
serves exactly one host that does not, so the number of sources doubles every round:
``ceil(log2(n))`` rounds for ``n`` hosts with one seed.

The model of the placement time behind docs/model-weights.md (the closed form and the
piece-level simulation of the swarm) is the benchmark's, ``scripts/bench_model_sim.py``:
it is not shipped to the hosts.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def plan(hosts, verified=(), seeds=None, engine=None, addresses=None):
    """The fan-out plan.

    ``hosts`` maps host -> site (in inventory order); ``verified`` is the hosts that hold a
    verified copy already; ``seeds`` maps site -> the host that should download (default:
    the site's first host); ``engine`` is the hosts where the swarm engine (libtorrent) is
    installed (None: no swarm, doubling rounds only); ``addresses`` maps host -> LAN address.

    Returns ``{"hub": [hosts that download from the Hub], "swarm": {host: {"role": seed,
    holder or peer, "feeder": the host whose records it takes, "peers": [the addresses of
    the site's swarm hosts], "feeder_address": the feeder's, "fetchers": [the addresses of
    the site's swarm hosts that fetch (role peer): they take slices from the feeder]}},
    "rounds": [{target: source}, ...], "sites": {site: [hosts]},
    "fallback": [the hosts whose missing engine makes their site use rounds: a seed or
    verified source without it, hosts that need a copy without it], "site_addresses":
    {site: [LAN addresses]} (the rsync daemons' ``hosts allow``)}``.

    A site swarms when its feeder (the seed that downloads, or a verified host) has the
    engine: every engine host of the site takes part, verified ones serve. The hosts
    without the engine then get their copy in doubling rounds from the swarm's hosts (all
    verified by then); a site whose feeder lacks the engine uses rounds only.
    """
    seeds = dict(seeds or {})
    verified = set(verified)
    engine = set(engine or ())
    addresses = dict(addresses or {})
    sites = {}
    for host, site in hosts.items():
        sites.setdefault(site, []).append(host)
    hub = []
    swarm = {}
    fallback = []
    per_site_rounds = []
    for site, members in sites.items():
        have = [h for h in members if h in verified]
        seed = None
        if not have:
            seed = seeds.get(site) or members[0]
            if seed not in members:
                raise ValueError("model seed %r of site %r is not a host of that site (%s)"
                                 % (seed, site, ", ".join(members)))
            hub.append(seed)
            have = [seed]
        feeder = seed or next((h for h in have if h in engine), None)
        need = [h for h in members if h not in have]
        swarmers = [h for h in members if h in engine]
        if need and feeder not in engine:
            fallback.append(feeder)  # the site cannot swarm: its source lacks the engine
        if feeder in engine and [h for h in need if h in engine]:
            peers = [addresses.get(h, h) for h in swarmers]
            fetchers = [addresses.get(h, h) for h in swarmers if h not in have]
            for host in swarmers:
                role = "seed" if host == seed else "holder" if host in have else "peer"
                swarm[host] = {"role": role, "feeder": feeder, "peers": peers,
                               "feeder_address": addresses.get(feeder, feeder),
                               "fetchers": fetchers}
            have = have + [h for h in swarmers if h not in have]
            need = [h for h in need if h not in swarmers]
        fallback.extend(h for h in need if h not in engine and h not in fallback)
        rounds = []
        while need:
            pairs = {}
            for source in list(have):
                if not need:
                    break
                target = need.pop(0)
                pairs[target] = source
            rounds.append(pairs)
            have.extend(pairs)
        per_site_rounds.append(rounds)
    depth = max([len(r) for r in per_site_rounds] or [0])
    merged = []
    for index in range(depth):
        pairs = {}
        for rounds in per_site_rounds:
            if index < len(rounds):
                pairs.update(rounds[index])
        merged.append(pairs)
    return {"hub": hub, "swarm": swarm, "rounds": merged, "sites": sites,
            "fallback": fallback if engine else [],
            "site_addresses": dict((site, [addresses.get(h, h) for h in members])
                                   for site, members in sites.items())}


def fleet_inputs(play_hosts, hostvars):
    """The plan's inputs from each host's facts (what the model role published):
    ``__model_site``, ``__model_address``, ``__model_is_seed``, ``__model_check``
    (its ``verified``) and ``__model_engine`` (the engine's version, empty without it).
    Returns (hosts, verified, seeds, engine, addresses)."""
    hosts, verified, seeds, engine, addresses = {}, [], {}, [], {}
    for host in play_hosts:
        facts = hostvars[host]
        site = str(facts.get("__model_site", "default"))
        hosts[host] = site
        addresses[host] = str(facts.get("__model_address") or host)
        if (facts.get("__model_check") or {}).get("verified"):
            verified.append(host)
        if _truthy(facts.get("__model_is_seed")) and site not in seeds:
            seeds[site] = host
        if facts.get("__model_engine"):
            engine.append(host)
    return hosts, verified, seeds, engine, addresses


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def rounds_needed(hosts, sources=1):
    """Rounds to reach ``hosts`` hosts from ``sources`` copies when sources double."""
    rounds = 0
    have = sources
    while have < hosts:
        have *= 2
        rounds += 1
    return rounds
