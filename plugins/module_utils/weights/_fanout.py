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

:func:`placement_time` is the model behind docs/model-weights.md: time to put a model of
``size`` bytes on ``n`` hosts.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _swarm


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


def placement_time(size, hosts, wan_bps, lan_bps, mode="doubling", sites=1, hash_bps=None,
                   file_bytes=None, efficiency=1.0, piece_bytes=None):
    """Seconds to place ``size`` bytes on ``hosts`` hosts (split evenly over ``sites``).

    ``hash_bps``: the rate one host verifies at (all its cores; about 150 MiB/s a core
    here). A host serves only a verified copy, so with doubling every round also waits for
    one verification; with every host pulling from the Hub, each verifies once at the end.

    - ``hub``: every host downloads from the Hub; a site's hosts share its WAN link, and a
      host cannot receive faster than its LAN port: ``size / min(wan / hosts_per_site,
      lan)``.
    - ``doubling``: one download per site over the WAN, then ``ceil(log2(hosts_per_site))``
      rounds of whole-copy transfers at LAN speed (one sender per receiver per round).
      Without pipelining: a host serves only once it holds a verified copy.
    - ``swarm``: the seed downloads once at ``min(wan, lan)`` (and no faster than it hashes:
      it hashes while it writes); each file is served as soon as the seed verified it, and
      every host forwards the pieces it holds, so the LAN fan-out of a file overlaps the
      download of the next. What is left after the last file (``file_bytes``, default the
      whole size) is that file's spread: ``file_bytes / lan`` at the engine's
      ``efficiency`` (its share of the line rate), plus one piece per doubling of the hosts
      (the depth of the piece relay: ``ceil(log2(hosts)) * piece_bytes / lan``). Peers
      verify pieces as they arrive, so no verification term is added for them.
    """
    per_site = int(math.ceil(hosts / float(sites)))
    verify = size / hash_bps if hash_bps else 0.0
    if mode == "hub":
        return size / min(wan_bps / per_site, lan_bps) + verify
    if mode == "doubling":
        return (size / min(wan_bps, lan_bps) + verify
                + rounds_needed(per_site) * (size / lan_bps + verify))
    if mode == "swarm":
        seed_bps = min(wan_bps, lan_bps, hash_bps or wan_bps)
        last = size if file_bytes is None else min(file_bytes, size)
        piece = piece_bytes or _swarm.piece_length(last)
        if per_site <= 1:
            return size / seed_bps
        return (size / seed_bps + last / (lan_bps * efficiency)
                + rounds_needed(per_site) * piece / lan_bps)
    raise ValueError("mode %r: expected hub, doubling or swarm" % mode)


def figures(size, host_counts, wan_bps, lan_bps, hash_bps=None, file_bytes=None,
            efficiency=1.0):
    """Rows of the model for the doc: hosts, rounds, hub seconds, doubling seconds, swarm
    seconds, WAN bytes."""
    rows = []
    for hosts in host_counts:
        rows.append({"hosts": hosts, "rounds": rounds_needed(hosts),
                     "hub_s": placement_time(size, hosts, wan_bps, lan_bps, "hub",
                                             hash_bps=hash_bps),
                     "doubling_s": placement_time(size, hosts, wan_bps, lan_bps, "doubling",
                                                  hash_bps=hash_bps),
                     "swarm_s": placement_time(size, hosts, wan_bps, lan_bps, "swarm",
                                               hash_bps=hash_bps, file_bytes=file_bytes,
                                               efficiency=efficiency),
                     "wan_bytes_hub": size * hosts, "wan_bytes_doubling": size})
    return rows


def simulate_swarm(hosts, files, pieces_per_file, wan_share=1.0, efficiency=1.0, seed=7,
                   tries=8):
    """A piece-level simulation of the swarm, in ticks of one piece time at LAN speed.

    The seed receives the stream from the WAN at ``wan_share`` pieces a tick and publishes a
    file once all its pieces are in (file granularity, as the step does). Every host serves
    the pieces it holds, up to ``efficiency`` pieces a tick (the engine's share of the line
    rate); every peer receives at most one piece a tick (its LAN port). Each tick, in random
    order, a peer asks up to ``tries`` random hosts with upload left for a published piece
    it lacks and takes a random one of those (random-first: peers hold different pieces
    and trade them, as rarest-first makes them). Returns the ticks until every host holds
    every piece; one host's single copy is ``files * pieces_per_file / wan_share`` ticks.
    """
    import random
    rng = random.Random(seed)
    total = files * pieces_per_file
    have = [0] * hosts  # bit sets of pieces held
    counts = [0] * hosts
    credit = [0.0] * hosts
    full = (1 << total) - 1
    ticks = 0
    limit = int(total / min(wan_share, 1.0) * 6 + 20 * hosts + 100)
    while min(counts[1:] or [total]) < total:
        ticks += 1
        if ticks > limit:
            raise ValueError("the simulated swarm did not finish in %d ticks" % limit)
        arrived = min(total, int(wan_share * ticks + 1e-9))
        have[0], counts[0] = (1 << arrived) - 1, arrived
        done_files = arrived // pieces_per_file if arrived < total else files
        published = (1 << (done_files * pieces_per_file)) - 1 if done_files < files else full
        for host in range(hosts):
            credit[host] = min(credit[host] + efficiency, 1.0 + efficiency)
        ready = [h for h in range(hosts) if credit[h] >= 1.0]
        peers = list(range(1, hosts))
        rng.shuffle(peers)
        for peer in peers:
            if counts[peer] == total or not ready:
                continue
            for _try in range(tries):
                pick = rng.randrange(len(ready))
                source = ready[pick]
                want = have[source] & published & ~have[peer]
                if not want:
                    continue
                shift = rng.randrange(total)
                part = want >> shift
                index = ((part & -part).bit_length() - 1 + shift) if part else \
                    (want & -want).bit_length() - 1
                have[peer] |= 1 << index
                counts[peer] += 1
                credit[source] -= 1.0
                if credit[source] < 1.0:
                    ready[pick] = ready[-1]
                    ready.pop()
                break
    return ticks
