"""A process that owns a BookKeeper managed ledger until it is killed (kill -9 in test_bk_ledger).

``python -m tests.managed_ledger.bk_owner <zk> <root>``: opens managed ledger "t" under ``root``, adds 10 entries,
acknowledges on cursor "sub" up to entry 4 plus entry 6, flushes the cursor (a PositionInfo in its cursor ledger),
then prints one JSON line (the positions) and waits to be killed, holding everything open.
"""

from __future__ import annotations

import asyncio
import json
import sys

from managed_ledger import InitialPosition
from tests.managed_ledger.ml_support import bookkeeper_factory


async def main(zk: str, root: str) -> None:
    factory = bookkeeper_factory(zk, root=root)
    ml = await factory.open("t")
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    positions = [await ml.add_entry_async(f"m{i}".encode()) for i in range(10)]
    cursor.mark_delete(positions[4])
    cursor.delete([positions[6]])
    await cursor.flush()
    print(json.dumps([list(p) for p in positions]), flush=True)
    await asyncio.Event().wait()  # until killed


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
