"""The sockets on the swarm's port, from the kernel's socket tables (issue 47: the awk over
/proc/net/tcp and the Jinja that counted its lines, with unit tests).

A table is ``/proc/net/tcp`` or ``/proc/net/tcp6``: a header line, then one line per socket,
``sl local_address rem_address st ...``, addresses as ``<hex address>:<hex port>`` and the
state in hex (``0A`` listening, ``01`` established, ``06`` time-wait).

``states --port P [FILE ...]`` (run on a host; FILE defaults to both tables): prints
``{port, states: the state of each socket with either end on P, open: those listening or
established}``.

``listening --port P --hosts H1,H2,...`` (run on the controller): reads both tables of each
container H (``podman exec H cat``) and prints ``{port, listening: H -> sockets listening on
P, hosts_listening: how many hosts have one, errors: H -> why its tables could not be read}``;
exits 1 when a host's tables could not be read (that host counts 0).
"""

import argparse
import json
import subprocess
import sys

TABLES = ["/proc/net/tcp", "/proc/net/tcp6"]
LISTEN = "0A"
ESTABLISHED = "01"


def _ends_on(address, port):
    return address.endswith(":%04X" % port)


def sockets(text):
    """``(local address, remote address, state)`` of each line of a table's text (the header's
    fields match no port)."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            out.append((fields[1], fields[2], fields[3]))
    return out


def states(text, port):
    """The state of each socket with either end on ``port``."""
    return [st for local, remote, st in sockets(text) if _ends_on(local, port) or _ends_on(remote, port)]


def listening(text, port):
    """How many sockets listen on ``port``."""
    return len([1 for local, _remote, st in sockets(text) if _ends_on(local, port) and st == LISTEN])


def host_tables(host):
    """Both tables of a container, as one text; raises OSError when podman fails."""
    done = subprocess.run(["podman", "exec", host, "cat"] + TABLES, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, check=False)
    if done.returncode != 0:
        raise OSError("podman exec %s cat: rc %d: %s" % (host, done.returncode, done.stderr.strip()))
    return done.stdout


def listening_on_hosts(hosts, port, read=host_tables):
    counts, errors = {}, {}
    for host in hosts:
        try:
            counts[host] = listening(read(host), port)
        except OSError as exc:
            counts[host], errors[host] = 0, str(exc)
    return {"port": port, "listening": counts,
            "hosts_listening": len([n for n in counts.values() if n > 0]), "errors": errors}


def main(argv=None, read=host_tables):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    sub = parser.add_subparsers(dest="what", required=True)
    one = sub.add_parser("states")
    one.add_argument("--port", type=int, required=True)
    one.add_argument("tables", nargs="*", default=TABLES)
    one = sub.add_parser("listening")
    one.add_argument("--port", type=int, required=True)
    one.add_argument("--hosts", required=True, help="the containers, comma-separated")
    args = parser.parse_args(argv)
    if args.what == "listening":
        out = listening_on_hosts(args.hosts.split(","), args.port, read)
        json.dump(out, sys.stdout)
        return 1 if out["errors"] else 0
    text = ""
    for path in args.tables:
        with open(path, encoding="ascii", errors="replace") as handle:
            text += handle.read()
    found = states(text, args.port)
    json.dump({"port": args.port, "states": found,
               "open": [st for st in found if st in (LISTEN, ESTABLISHED)]}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
