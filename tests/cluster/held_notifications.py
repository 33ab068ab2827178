"""A broker process whose metadata store never delivers the notifications of some paths: it knows what another broker
stores under them only by reading the store, as if every notification came late. Deterministic, where racing a real
notification is not.

``start_broker(..., command_prefix=held_notifications.command_prefix(paths))`` runs
``python -m tests.cluster.held_notifications PATH[,PATH...] <python> -m broker standalone ...``: this module drops
the ZooKeeper store's notifications of each path and of everything below it, then runs ``broker`` as ``-m`` would, in
the same process (so the broker's pid is this one's).
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Sequence

from metadata_store.api import Notification
from metadata_store.zookeeper import ZooKeeperMetadataStore


def command_prefix(paths: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", __name__, ",".join(paths)]


def hold(paths: Sequence[str]) -> None:
    deliver = ZooKeeperMetadataStore._deliver

    def held(self: ZooKeeperMetadataStore, notes: list[Notification]) -> None:
        deliver(self, [n for n in notes if not any(n.path == p or n.path.startswith(p + "/") for p in paths)])

    ZooKeeperMetadataStore._deliver = held  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    paths, command = argv[0].split(","), argv[1:]
    if command[1:3] != ["-m", "broker"]:
        raise SystemExit(f"expected <python> -m broker ..., got {command}")
    hold(paths)
    sys.argv = ["broker", *command[3:]]
    runpy.run_module("broker", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
