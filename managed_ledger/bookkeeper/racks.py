"""The bookies' racks in force: Pulsar's ``/bookies`` node of the broker's metadata store, followed.

As Pulsar's BookieRackAffinityMapping: read when the client starts, read again on every notification of the node
(created, changed, deleted: Pulsar's handleUpdates) and after the store's session comes back (a notification may
have been missed meanwhile). Until the first read, and while the node does not exist, no bookie has a rack.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from managed_ledger.bookkeeper.placement import RACKS_PATH, RackConfiguration, RackMap, parse_rack_configuration
from metadata_store.api import MetadataStore, Notification, SessionEvent

log = logging.getLogger(__name__)


class BookieRacks:
    def __init__(self) -> None:
        self.configuration: RackConfiguration = {}
        self.map = RackMap()
        self._store: MetadataStore | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._again = False
        self._closed = False

    def set(self, configuration: RackConfiguration) -> None:
        """Put ``configuration`` (a BookiesRackConfiguration) in force."""
        if configuration != self.configuration:
            log.info("bookie racks: %s", configuration or "none")
        self.configuration = configuration
        self.map = RackMap(configuration)

    async def follow(self, store: MetadataStore) -> None:
        """Read the racks from ``store`` now, and keep them fresh from then on."""
        self._store = store
        store.register_listener(self._on_notification)
        store.register_session_listener(self._on_session_event)
        await self.reload()

    async def reload(self) -> None:
        if self._store is None:
            return
        result = await self._store.get(RACKS_PATH)
        self.set(parse_rack_configuration(None if result is None else result.value))

    async def close(self) -> None:
        self._closed = True
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher

    def _on_notification(self, notification: Notification) -> None:
        if notification.path == RACKS_PATH:
            self._refresh_soon()

    def _on_session_event(self, event: SessionEvent) -> None:
        if event in (SessionEvent.RECONNECTED, SessionEvent.SESSION_REESTABLISHED):
            self._refresh_soon()

    def _refresh_soon(self) -> None:
        if self._closed:
            return
        if self._refresher is not None and not self._refresher.done():
            self._again = True  # (read once more when the read under way ends: it may have missed this change)
            return
        self._refresher = asyncio.get_running_loop().create_task(self._refresh(), name="bookie-racks-refresh")

    async def _refresh(self) -> None:
        while not self._closed:
            self._again = False
            try:
                await self.reload()
            except Exception as exc:  # (the store is unreachable: its RECONNECTED brings another read)
                log.warning("bookie racks: reading %s failed: %s", RACKS_PATH, exc)
            if not self._again:
                return
