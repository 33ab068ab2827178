"""``python -m broker standalone [--config FILE] [--port N] [--web-port N] [--data-dir DIR] ...``"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import resource
import signal
import sys
from pathlib import Path

from broker.config import DEFAULT_CONFIG_PATH, BrokerConfig, ConfigError
from broker.server import BrokerServer
from metadata_store.api import MetadataStoreError

log = logging.getLogger("broker")

# Exit status when the configuration is refused (a bad value, file or flag), as argparse's.
EXIT_CONFIGURATION_ERROR = 2

# Allocations between young-generation collections (CPython's default is 700).
GC_YOUNG_THRESHOLD = 50_000


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m broker", description="Pulsar-protocol broker")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("standalone", help="run a standalone broker")
    s.add_argument("--config", help=f"config file with Pulsar key names (default {DEFAULT_CONFIG_PATH} if present)")
    s.add_argument("--port", type=int, help="binary protocol port (brokerServicePort); 0 picks a free port")
    s.add_argument("--web-port", type=int, help="HTTP port (webServicePort); 0 picks a free port")
    s.add_argument("--data-dir", help="data directory (dataDir)")
    s.add_argument("--advertised-address", help="host name put in lookup answers (advertisedAddress)")
    s.add_argument("--bind-address", help="address to listen on (bindAddress)")
    s.add_argument("--log-level", default="INFO", type=str.upper, choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                   help="DEBUG, INFO, WARNING, ERROR")
    return p.parse_args(argv)


def load_config(args: argparse.Namespace) -> BrokerConfig:
    path: Path | None = Path(args.config) if args.config else None
    if path is None and DEFAULT_CONFIG_PATH.exists():
        path = DEFAULT_CONFIG_PATH
    return BrokerConfig.load(
        path,
        brokerServicePort=args.port,
        webServicePort=args.web_port,
        dataDir=args.data_dir,
        advertisedAddress=args.advertised_address,
        bindAddress=args.bind_address,
    )


def tune_gc() -> None:
    """Garbage-collector settings for a broker process (only the standalone process: an embedded
    broker leaves its host's GC alone).

    The hot paths allocate a few short-lived containers per message and almost no reference
    cycles, so CPython's default young-generation threshold (700 allocations) ran a collection
    every few dozen messages, about 4 us of CPU per unbatched message. A higher threshold keeps
    collections rare; freezing moves everything built at start-up (modules, config, protobuf
    descriptors) out of the collector's view for good.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 10)


def raise_open_file_limit() -> None:
    """Raise the soft limit on open files to the hard limit, as the JVM does for Apache Pulsar.

    Every connection and every topic's open segment file takes a descriptor; a common soft limit
    of 1024 would cap the broker at about a thousand topics and connections for no reason. (The
    file ledger also closes idle segment files beyond half the limit.)
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return
    # An unlimited hard limit is still capped by the kernel (fs.nr_open, 1048576 by default).
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))  # the hard limit stays
        except (OSError, ValueError) as exc:
            log.warning("could not raise the open-file limit from %d: %s", soft, exc)
            return
        log.info("open-file limit raised from %d to %d", soft, target)


async def run(config: BrokerConfig) -> None:
    server = BrokerServer(config)
    await server.start()
    tune_gc()
    loop = asyncio.get_running_loop()
    stop = server.shutdown_requested  # (also set by the admin API's POST /admin/v2/brokers/shutdown)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down (a signal, or POST /admin/v2/brokers/shutdown)")
    await server.stop()


def configuration_error(exc: Exception) -> int:
    """One line on stderr, no traceback, and exit status 2 (as argparse for a bad flag)."""
    print(f"configuration error: {exc}", file=sys.stderr)
    return EXIT_CONFIGURATION_ERROR


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args)
    except (OSError, ValueError) as exc:  # (ConfigError is a ValueError; so is an undecodable file)
        return configuration_error(exc)
    raise_open_file_limit()
    try:
        import uvloop

        uvloop.run(run(config))
    except ConfigError as exc:  # (checks that need more than one key or a file, made at start)
        return configuration_error(exc)
    except OSError as exc:
        log.error("cannot start: %s", exc)
        return 1
    except MetadataStoreError as exc:  # (the store failed while the metadata was being loaded)
        log.error("cannot start: the metadata store failed: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
