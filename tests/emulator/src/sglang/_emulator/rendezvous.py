"""A small, real TCP rendezvous for ``--nnodes N``: rank 0 listens on the
``--dist-init-addr`` port, workers connect and say hello; the connections stay open
so either side notices when the other goes away."""

import json
import socket
import threading
import time

from sglang._emulator.state import log

HELLO_KEYS = ("tp_size", "pp_size", "nnodes")


class RendezvousError(Exception):
    pass


def parse_addr(addr):
    if not addr or ":" not in addr:
        raise RendezvousError("--dist-init-addr must be host:port, got %r" % (addr,))
    host, port = addr.rsplit(":", 1)
    host = host.strip("[]")
    try:
        return host, int(port)
    except ValueError:
        raise RendezvousError("bad port in --dist-init-addr %r" % (addr,)) from None


def _hello(layout, release):
    msg = {k: layout[k] for k in HELLO_KEYS}
    msg.update({"hello": "sglang-emulator", "node_rank": layout["node_rank"],
                "ep_size": layout["ep_size"], "release": release})
    return msg


def _send(sock, obj):
    sock.sendall((json.dumps(obj) + "\n").encode("utf-8"))


def _recv_line(sock, limit=65536):
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            raise RendezvousError("connection closed during handshake")
        buf += chunk
        if len(buf) > limit:
            raise RendezvousError("handshake message too long")
    return json.loads(buf.decode("utf-8"))


class Rank0:
    def __init__(self, addr, layout, release):
        self.host, self.port = parse_addr(addr)
        self.layout = layout
        self.release = release
        self.workers = {}
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((self.host, self.port))
        except OSError:
            # The address may name this host by an address it does not hold locally.
            self.sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", self.port))
        self.sock.listen(64)

    def wait(self, timeout=None):
        need = self.layout["nnodes"] - 1
        log("Waiting for %d worker node(s) to join at %s:%d"
            % (need, self.host, self.port), "TP0")
        deadline = None if timeout is None else time.monotonic() + timeout
        mine = _hello(self.layout, self.release)
        while len(self.workers) < need:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RendezvousError(
                        "timed out after %ss waiting for worker nodes: %d of %d joined"
                        % (timeout, len(self.workers), need))
                self.sock.settimeout(left)
            try:
                conn, peer = self.sock.accept()
            except socket.timeout:
                continue
            conn.settimeout(10)
            try:
                hello = _recv_line(conn)
            except (RendezvousError, OSError, ValueError) as exc:
                log("Ignoring connection from %s: %s" % (peer[0], exc), "TP0")
                conn.close()
                continue
            if not isinstance(hello, dict) or hello.get("hello") != "sglang-emulator":
                conn.close()
                continue
            rank = hello.get("node_rank")
            bad = [k for k in HELLO_KEYS if hello.get(k) != mine[k]]
            problem = None
            if bad:
                problem = "node_rank %s disagrees on %s: %s (rank 0 has %s)" % (
                    rank, ", ".join(bad), {k: hello.get(k) for k in bad},
                    {k: mine[k] for k in bad})
            elif not isinstance(rank, int) or not 1 <= rank <= need:
                problem = "invalid node_rank %r for nnodes=%d" % (rank, need + 1)
            elif rank in self.workers:
                problem = "node_rank %d joined twice" % rank
            if problem:
                try:
                    _send(conn, {"ok": False, "error": problem})
                finally:
                    conn.close()
                raise RendezvousError(problem)
            _send(conn, {"ok": True, "rank0": mine})
            conn.settimeout(None)
            self.workers[rank] = conn
            log("Node %d joined from %s (%d/%d)" % (rank, peer[0], len(self.workers), need),
                "TP0")
        self.sock.close()

    def monitor(self, on_lost):
        for rank, conn in self.workers.items():
            threading.Thread(target=_watch, args=(conn, rank, on_lost), daemon=True).start()


def _watch(conn, rank, on_lost):
    try:
        while conn.recv(4096):
            pass
    except OSError:
        pass
    on_lost(rank)


def worker_join(addr, layout, release, timeout):
    host, port = parse_addr(addr)
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection((host, port), timeout=5)
        except OSError as exc:
            last = exc
            time.sleep(min(0.5, max(deadline - time.monotonic(), 0)))
            continue
        try:
            _send(sock, _hello(layout, release))
            reply = _recv_line(sock)
        except (OSError, ValueError, RendezvousError) as exc:
            sock.close()
            last = exc
            time.sleep(0.5)
            continue
        if not reply.get("ok"):
            sock.close()
            raise RendezvousError("rank 0 refused this node: %s" % reply.get("error"))
        sock.settimeout(None)
        return sock
    raise RendezvousError("could not reach rank 0 at %s:%d within %ss (%s)"
                          % (host, port, timeout, last))
