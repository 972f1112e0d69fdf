"""The model behind docs/model-weights.md's figures, for ``scripts/bench-model`` (and its
tests): the time to put a model on ``n`` hosts, in closed form (:func:`placement_time`,
:func:`figures`) and as a piece-level simulation of the swarm (:func:`simulate_swarm`).

A benchmark's module, not the collection's: nothing on a host runs it, so it lives beside
the script and is not shipped with the module_utils. The plan the model step runs is
``plugins/module_utils/weights/_fanout.py``'s.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import random

from ansible_collections.gpufleet.sglang.plugins.module_utils.common._weights import piece_length
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights._fanout import rounds_needed


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
        piece = piece_bytes or piece_length(last)
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
