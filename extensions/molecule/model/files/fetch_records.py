"""What the model scenario's fetches did, as plain figures (issue 47: the checks that decoded
the slurped records and dug through the Hub double's counters in Jinja).

Each subcommand reads one JSON object on stdin that verify.yml builds from what it read, and
prints one JSON object. The inputs, as the scenario has them:

* ``repo``: the Hub double's ``/_admin/repo`` (``commit``, ``tree``: entries with ``path``
  and ``size``);
* ``hub``: its ``/_admin/counters`` (``requests`` by kind, ``file_bytes_total``,
  ``requests_total``, ``bytes_by_path``, ``log``: one entry per request with ``client`` and
  ``file``);
* ``fetched``: a host's ``.<commit>.last-fetch.json`` as ``ansible.builtin.slurp`` returns it
  (base64 ``content``; model_fetch's result: ``source``, ``bytes_hashed``, ``hub_gets``,
  ``bytes_transferred``, ``bytes_redundant``, ``resumed_from``, ``transferred``, ``engine``,
  ``engine_disk``, ``io``, ``elapsed``, ...), or null where the host read none;
* ``marker``: a host's ``.gpufleet-verified.json``, slurped (``files``: path -> ``size``,
  ``mtime_ns``, ``against``).

Subcommands and what they print:

``hub`` (repo, hub): ``files`` (each tree file's ``path``, ``size`` and ``from_hub``, its
bytes in the counters), ``file_clients`` (the clients that asked for file bytes, first seen
first), ``requests``, ``head_requests`` (null: none counted), ``revision_requests``,
``tree_files``.

``placement`` (repo, hub, hosts, fetched: one per host): ``records`` (host -> its record),
``total_bytes``, ``tree_files``, ``hub_sources`` (records with source hub), ``seed`` (the
first of those) and ``seed_hub_gets``, ``hub_range_gets`` (the Hub's ``cdn_get`` plus
``resolve_get``), ``requests``, ``fanout`` (Hub file bytes and requests, ``peer_bytes``: the
bytes the peers received, ``per_host``: ``[source, bytes, seconds]``).

``swarm`` (repo, fetched, marker): the record's ``source``, ``engine``,
``engine_is_libtorrent``, ``bytes_read_to_hash``, ``io_has_read_bytes``, ``bytes_served``,
``engine_read_back`` (``engine_disk.read_back``, null if absent); the marker's ``files``
(count) against ``tree_files``, and ``against_matching``: the marker's files verified against
what the host's source hands out (``against_pattern``: the Hub's digest for the seed, the
seed's pieces or an empty file's digest for a peer); ``record`` and ``marker_files`` as read.

``repair`` (repo, fetched or null; ``--shard``, ``--kept``): ``total_bytes``, ``shard_size``
(null: not in the tree), ``shard_missing`` (its size less ``--kept``), ``fetch`` (the record or
null), ``received`` (bytes transferred less those received twice), ``elapsed_s`` (rounded).

``resume`` (repo, fetched, progress: the model_wait lines of the run): ``source``,
``resumed_from``, ``resumed_files``, ``resumed_bytes``, ``missing_bytes`` (the transferred
files' sizes less what was resumed), ``bytes_transferred``, ``total_bytes``,
``progress_lines`` and ``eta_lines`` (lines with files, bytes, rate and ETA), ``record``.
"""

import argparse
import base64
import json
import re
import sys

from _stdin_json import answer, unique

#: what a seed's file is verified against: the Hub's digest (sha256 or, small files, git-sha1)
HUB_AGAINST = r"^(sha256|git-sha1):"
#: what a peer's file is verified against: the seed's piece hashes; an empty file, its digest
PEER_AGAINST = r"^(btv1:|git-sha1:.*\(empty\)|sha256:.*\(empty\))"
#: a progress line of model_wait (_model.progress_line)
PROGRESS_LINE = r"files, .* of .*/s, ETA"


def decode(content):
    """The JSON document of a slurped file (its base64 ``content``)."""
    return json.loads(base64.b64decode(content))


def total_bytes(repo):
    return sum(entry["size"] for entry in repo["tree"])


def hub_figures(repo, hub):
    requests = hub["requests"]
    return {
        "files": [{"path": entry["path"], "size": entry["size"],
                   "from_hub": hub["bytes_by_path"].get(entry["path"], 0)} for entry in repo["tree"]],
        "file_clients": unique(entry["client"] for entry in hub["log"] if entry.get("file")),
        "requests": requests,
        "head_requests": requests.get("head"),
        "revision_requests": requests.get("revision", 0),
        "tree_files": len(repo["tree"]),
    }


def placement(repo, hub, hosts, fetched):
    if len(hosts) != len(fetched):
        raise ValueError("%d hosts, %d records" % (len(hosts), len(fetched)))
    records = dict((host, decode(content)) for host, content in zip(hosts, fetched))
    seeds = [host for host in hosts if records[host].get("source") == "hub"]
    seed = seeds[0] if seeds else None
    requests = hub["requests"]
    return {
        "records": records,
        "total_bytes": total_bytes(repo),
        "tree_files": len(repo["tree"]),
        "hub_sources": len(seeds),
        "seed": seed,
        "seed_hub_gets": records[seed].get("hub_gets") if seed else None,
        "hub_range_gets": requests.get("cdn_get", 0) + requests.get("resolve_get", 0),
        "requests": requests,
        "fanout": {
            "hub_file_bytes": hub["file_bytes_total"],
            "hub_requests": hub["requests_total"],
            "peer_bytes": sum(records[host].get("bytes_transferred") or 0 for host in hosts
                              if records[host].get("source") == "peer"),
            "per_host": [[records[host].get("source"), records[host].get("bytes_transferred"),
                          round(records[host].get("elapsed", 0), 2)] for host in hosts],
        },
    }


def swarm(repo, fetched, marker):
    record = decode(fetched)
    files = decode(marker)["files"]
    source = record.get("source")
    pattern = HUB_AGAINST if source == "hub" else PEER_AGAINST
    against = [entry.get("against") for entry in files.values()]
    engine = record.get("engine")
    return {
        "source": source,
        "engine": engine,
        "engine_is_libtorrent": isinstance(engine, str) and re.match("libtorrent ", engine) is not None,
        "bytes_read_to_hash": record.get("bytes_read_to_hash"),
        "io_has_read_bytes": isinstance(record.get("io"), dict) and "read_bytes" in record["io"],
        "bytes_served": record.get("bytes_served"),
        "engine_read_back": (record.get("engine_disk") or {}).get("read_back"),
        "files": len(files),
        "tree_files": len(repo["tree"]),
        "against_pattern": pattern,
        "against_matching": len([note for note in against
                                 if isinstance(note, str) and re.match(pattern, note)]),
        "record": record,
        "marker_files": files,
    }


def repair(repo, fetched, shard, kept=None):
    sizes = [entry["size"] for entry in repo["tree"] if entry["path"] == shard]
    shard_size = sizes[0] if sizes else None
    out = {
        "total_bytes": total_bytes(repo),
        "shard_size": shard_size,
        "shard_missing": shard_size - kept if shard_size is not None and kept is not None else None,
        "fetch": None,
        "received": None,
        "elapsed_s": None,
    }
    if fetched:
        record = decode(fetched)
        out["fetch"] = record
        if "bytes_transferred" in record and "bytes_redundant" in record:
            out["received"] = record["bytes_transferred"] - record["bytes_redundant"]
        if "elapsed" in record:
            out["elapsed_s"] = round(record["elapsed"], 2)
    return out


def resume(repo, fetched, progress):
    record = decode(fetched)
    resumed = record["resumed_from"]
    transferred = record["transferred"]
    resumed_bytes = sum(resumed.values())
    transferred_bytes = sum(entry["size"] for entry in repo["tree"] if entry["path"] in transferred)
    return {
        "source": record.get("source"),
        "resumed_from": resumed,
        "resumed_files": len(resumed),
        "resumed_bytes": resumed_bytes,
        "missing_bytes": transferred_bytes - resumed_bytes,
        "bytes_transferred": record.get("bytes_transferred"),
        "total_bytes": total_bytes(repo),
        "progress_lines": len(progress),
        "eta_lines": len([line for line in progress if re.search(PROGRESS_LINE, line)]),
        "record": record,
    }


def figures(what, doc, args):
    if what == "hub":
        return hub_figures(doc["repo"], doc["hub"])
    if what == "placement":
        return placement(doc["repo"], doc["hub"], doc["hosts"], doc["fetched"])
    if what == "swarm":
        return swarm(doc["repo"], doc["fetched"], doc["marker"])
    if what == "repair":
        return repair(doc["repo"], doc.get("fetched"), args.shard, args.kept)
    return resume(doc["repo"], doc["fetched"], doc["progress"])


def main(argv=None, stdin=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    sub = parser.add_subparsers(dest="what", required=True)
    for name in ("hub", "placement", "swarm", "resume"):
        sub.add_parser(name)
    one = sub.add_parser("repair")
    one.add_argument("--shard", required=True, help="the shard the step damaged")
    one.add_argument("--kept", type=int, help="the bytes the truncation kept")
    args = parser.parse_args(argv)
    return answer("fetch_records", args.what, lambda doc: figures(args.what, doc, args), stdin)


if __name__ == "__main__":
    sys.exit(main())
