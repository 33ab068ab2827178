"""A network namespace of a test's own, joined to the test's namespace by a veth pair, for link-down faults.

The process placed in it (``command_prefix``: ``ip netns exec <name>``) binds ``inner_address``; the test's side of
the link has ``outer_address``. ZooKeeper and the bookies of ``tests/cluster`` listen on 127.0.0.1 of the test's
namespace and the bookies are registered under 127.0.0.1: so inside the namespace, 127.0.0.1 is routed over the link
(a rule ahead of the local table; ``route_localnet`` on both ends of the pair, so the kernel accepts loopback
addresses on it), and the process reaches them exactly as the others do. ``down()`` / ``up()`` set the link's test
side down and up: the process then reaches nothing and nothing reaches it (ZooKeeper, bookies, clients, brokers).

Only what it creates is touched: the namespace and the veth pair, removed on exit (``ip netns del``, after the
processes in it are gone). Needs root, iproute2 and a kernel that lets it create namespaces (``netns_or_skip``).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.needs import unavailable

# The routing table inside the namespace that sends 127.0.0.1 over the link.
LOOPBACK_TABLE = "200"


def ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *(["netns", "exec", netns, "ip"] if netns else []), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")


def sysctl(key: str, value: str, netns: str | None = None) -> None:
    cmd = [*(["ip", "netns", "exec", netns] if netns else []), "sysctl", "-qw", f"{key}={value}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")


@dataclass
class LinkedNamespace:
    name: str
    outer_link: str  # the test side of the veth pair
    inner_link: str
    outer_address: str
    inner_address: str

    @property
    def command_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def down(self) -> None:
        ip("link", "set", self.outer_link, "down")

    def up(self) -> None:
        ip("link", "set", self.outer_link, "up")


def netns_or_skip() -> None:
    """Skip unless this process may create network namespaces: root, iproute2 and sysctl, and a kernel (container)
    that grants it (a container without CAP_NET_ADMIN / CAP_SYS_ADMIN refuses: a skip, with the reason, even under
    CI=true, since no install provides it; missing tools fail under CI=true)."""
    missing = ("no iproute2 (ip)" if shutil.which("ip") is None
               else "no sysctl" if shutil.which("sysctl") is None else None)
    if missing is not None:
        unavailable(f"link-down tests need iproute2 and sysctl: {missing}")
    if os.geteuid() != 0:
        pytest.skip("link-down tests create network namespaces: they need root")
    probe = f"lkdprobe{os.getpid()}"
    try:
        ip("netns", "add", probe)
    except RuntimeError as exc:
        pytest.skip(f"this machine does not let tests create network namespaces: {exc}")
    ip("netns", "del", probe)


@contextlib.contextmanager
def linked_namespace() -> Iterator[LinkedNamespace]:
    tag = f"{os.getpid() % 100000}{random.randrange(100):02d}"  # (interface names: 15 characters at most)
    octet = random.randrange(1, 250)
    ns = LinkedNamespace(f"lkd{tag}", f"lkd{tag}o", f"lkd{tag}i", f"10.199.{octet}.1", f"10.199.{octet}.2")
    created = False
    try:
        ip("netns", "add", ns.name)
        created = True
        ip("link", "add", ns.outer_link, "type", "veth", "peer", "name", ns.inner_link)
        ip("link", "set", ns.inner_link, "netns", ns.name)
        ip("addr", "add", f"{ns.outer_address}/30", "dev", ns.outer_link)
        ip("link", "set", ns.outer_link, "up")
        sysctl(f"net.ipv4.conf.{ns.outer_link}.route_localnet", "1")
        ip("link", "set", "lo", "up", netns=ns.name)
        ip("addr", "add", f"{ns.inner_address}/30", "dev", ns.inner_link, netns=ns.name)
        ip("link", "set", ns.inner_link, "up", netns=ns.name)
        sysctl(f"net.ipv4.conf.{ns.inner_link}.route_localnet", "1", netns=ns.name)
        # 127.0.0.1 over the link: a rule ahead of the local table (moved from priority 0 to 100).
        ip("route", "add", "127.0.0.1/32", "via", ns.outer_address, "dev", ns.inner_link, "src", ns.inner_address,
           "table", LOOPBACK_TABLE, netns=ns.name)
        ip("rule", "add", "to", "127.0.0.1/32", "lookup", LOOPBACK_TABLE, "pref", "50", netns=ns.name)
        ip("rule", "add", "lookup", "local", "pref", "100", netns=ns.name)
        ip("rule", "del", "pref", "0", netns=ns.name)
        yield ns
    finally:
        if created:
            with contextlib.suppress(RuntimeError):
                ip("link", "del", ns.outer_link)  # (both ends go)
            ip("netns", "del", ns.name)
