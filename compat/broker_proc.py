"""One broker process for the compatibility suite: ``python -m compat.broker_proc SETTINGS_JSON OUT_JSON``.

Starts the embedded broker with the Pulsar keys in SETTINGS_JSON on free 127.0.0.1 ports, writes its
URLs to OUT_JSON once it serves, and runs until SIGTERM or SIGINT (run.py stops it by pid).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

from broker.embedded import Broker


async def serve(settings: dict[str, Any], out: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with Broker(**settings) as broker:
        urls = {"service_url": broker.service_url, "web_url": broker.web_url,
                "service_url_tls": broker.service_url_tls, "web_url_tls": broker.web_url_tls}
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(urls))
        tmp.replace(out)  # atomic: the runner never reads half a file
        await stop.wait()


def main() -> None:
    settings = json.loads(Path(sys.argv[1]).read_text())
    asyncio.run(serve(settings, Path(sys.argv[2])))


if __name__ == "__main__":
    main()
