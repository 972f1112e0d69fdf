"""The tests' port helper: ports outside the kernel's ephemeral range, and a probe that
does not take a connection to itself for a listener."""

import socket

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _net
from ansible_collections.gpufleet.sglang.tests import ports


def test_the_ephemeral_range_is_read_from_the_kernel(tmp_path):
    conf = tmp_path / "ip_local_port_range"
    conf.write_text("40000\t50000\n")
    assert ports.ephemeral_range(str(conf)) == (40000, 50000)
    assert ports.ephemeral_range(str(tmp_path / "missing")) == ports.EPHEMERAL_DEFAULT
    conf.write_text("garbage\n")
    assert ports.ephemeral_range(str(conf)) == ports.EPHEMERAL_DEFAULT


@pytest.mark.parametrize("ephemeral", [(32768, 60999), (15000, 65535), (10000, 20000)])
def test_free_ports_lie_outside_the_ephemeral_range(ephemeral):
    low, high = ephemeral
    for _try in range(50):
        port = ports.free_port(ephemeral=ephemeral)
        assert ports.LOWEST <= port <= 65535 and not low <= port <= high, port


def test_a_range_that_leaves_no_port_is_an_error():
    with pytest.raises(RuntimeError, match="leaves no port"):
        ports.candidate_ports((1024, 65535))


@pytest.mark.parametrize("itself", [True, False])
def test_a_connection_to_itself_is_no_listener(monkeypatch, itself):
    port = ports.free_port()
    listener = None
    if not itself:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", port))
        listener.listen(1)
    real = socket.create_connection
    monkeypatch.setattr(_net.socket, "create_connection",
                        lambda address, timeout=None: (ports.connected_to_itself(port) if itself
                                                       else real(address, timeout=timeout)))
    try:
        assert ports.port_open("127.0.0.1", port) is (not itself)
    finally:
        if listener:
            listener.close()
    monkeypatch.undo()
    assert not ports.port_open("127.0.0.1", port)  # nothing listens now
