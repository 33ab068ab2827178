"""`python -m cluster up|down`: what `make cluster-up` / `make cluster-down` run."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from cluster.local import ClusterError, LocalCluster, broker_settings, start_broker, start_cluster, stop_cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster")
    parser.add_argument("command", choices=["up", "down"])
    parser.add_argument("--state", default=".cluster", help="state directory; cluster.json is written there")
    parser.add_argument("--bookies", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=1,
                        help="brokers on BookKeeper and ZooKeeper (cluster mode: they share the bundles)")
    args = parser.parse_args(argv)
    state = Path(args.state).resolve()
    description = state / "cluster.json"
    if args.command == "up":
        if args.brokers < 0:
            print(f"cluster-up: BROKERS={args.brokers}: expected 0 or more", file=sys.stderr)
            return 2
        if description.exists():
            print(f"cluster-up: {description} exists: a cluster is (or was) running; `make cluster-down` first",
                  file=sys.stderr)
            return 1
        if state.exists():
            shutil.rmtree(state)  # a stopped cluster's data: ZooKeeper must start empty to be formatted again
        try:
            cluster = start_cluster(state, bookies=args.bookies)
        except ClusterError as e:
            print(f"cluster-up: {e}", file=sys.stderr)
            return 1
        try:
            quorum = min(2, args.bookies)  # Pulsar's default 2/2/2 when there are bookies enough
            for _ in range(args.brokers):
                start_broker(cluster, broker_settings(cluster, ensemble=quorum, write_quorum=quorum,
                                                      ack_quorum=quorum))
        except ClusterError as e:
            stop_cluster(cluster)
            print(f"cluster-up: {e}", file=sys.stderr)
            return 1
        description.write_text(cluster.to_json())
        print(cluster.to_json(), end="")
        print(f"cluster-up: written {description}")
        return 0
    if not description.exists():
        print(f"cluster-down: no {description}: nothing to stop")
        return 0
    cluster = LocalCluster.from_json(description.read_text())
    stop_cluster(cluster)
    description.unlink()
    print(f"cluster-down: stopped pids {' '.join(map(str, cluster.pids()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
