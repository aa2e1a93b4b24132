"""The cluster-mode Proxy's start (aiorocket.testing.cluster_proxy) without a JVM: the
ports it picks, and a start again after one of them was taken."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiorocket.testing import cluster_proxy
from aiorocket.testing._procs import port_free
from aiorocket.testing.cluster_proxy import ClusterProxy, _PortTaken


def test_a_proxys_ports_are_free_and_below_the_ephemeral_range() -> None:
    """A port of the ephemeral range, picked free, was open to every outgoing connection
    the machine made until the JVM bound it (20-60 s later under load): the JVM then
    exited on a BindException. Before, the ports were the kernel's bind(0) choice: in
    that range."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(20):
        grpc, remoting = cluster_proxy._pick_ports()
        assert grpc != remoting
        assert all(30000 <= p < low and port_free(p) for p in (grpc, remoting)), (grpc, low)


def test_a_start_whose_port_was_taken_starts_again_on_other_ports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ports of its own choosing: a start again on fresh ones (up to three starts); a
    restart's ports are the test's: its failure is the start's."""
    tried: list[tuple[int, int] | None] = []

    def start_once(self: ClusterProxy, timeout: float, ports: tuple[int, int] | None) -> str:
        tried.append(ports)
        if len(tried) < 3:
            raise _PortTaken("exited: java.net.BindException")
        return "127.0.0.1:30001"

    monkeypatch.setattr(ClusterProxy, "_start_once", start_once)
    proxy = ClusterProxy(object())  # type: ignore[arg-type]
    assert proxy.start() == "127.0.0.1:30001" and tried == [None, None, None]
    tried.clear()
    with pytest.raises(_PortTaken):
        proxy.start(ports=(30001, 30002))
    assert tried == [(30001, 30002)]

    def never(self: ClusterProxy, timeout: float, ports: tuple[int, int] | None) -> str:
        tried.append(ports)
        raise _PortTaken("exited: java.net.BindException")

    monkeypatch.setattr(ClusterProxy, "_start_once", never)
    tried.clear()
    with pytest.raises(_PortTaken):  # the third start's failure is the start's
        proxy.start()
    assert tried == [None, None, None]
