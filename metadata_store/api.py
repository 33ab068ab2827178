"""The metadata store's contract, with Pulsar's semantics (``MetadataStore``, ``MetadataStoreExtended``).

- A path is absolute, ``/``-separated, with no trailing slash (``/admin/policies/public/default``).
  Values are bytes; what they mean (JSON, protobuf) is the caller's business.
- ``put`` creates missing parent nodes (with empty values), as Pulsar's stores do.
- Versions: a node is created with version 0 and each successful ``put`` adds one.
  ``expected_version`` is ``None`` (write whatever is there), ``-1`` (the node must not exist:
  create only) or the version the caller read (compare-and-set). A mismatch raises
  ``BadVersionError``; with ``-1`` and an existing node, ``BadVersionError`` too (as Pulsar).
- Ephemeral nodes live as long as this store's session; ``sequential`` appends a zero-padded
  10-digit counter to the last path element (ZooKeeper's, and BookKeeper's ledger ids use it)
  and the returned ``Stat.path`` says which name was made.
- Watches are hints: a ``Notification`` says a path changed, never to what. After
  ``SessionEvent.RECONNECTED`` or ``SESSION_REESTABLISHED`` a listener must re-read what it caches,
  because notifications may have been missed meanwhile. After ``SESSION_LOST`` this store's
  ephemeral nodes are gone: whoever owned something through one must stop acting as the owner.
- Listeners are plain callables run on the store's event loop; they must not block.
- Every method may raise ``MetadataStoreError`` (e.g. the backend is unreachable past its timeout).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class MetadataStoreError(Exception):
    """The store could not do what was asked (the backend failed, timed out or is closed)."""


class StoreWriteError(MetadataStoreError):
    """A change could not be made durable (a full disk, an I/O error): none of it was applied."""


class NotFoundError(MetadataStoreError):
    """The path does not exist (delete, or a put with an expected version on a missing node)."""


class BadVersionError(MetadataStoreError):
    """The node's version is not the expected one (someone else wrote it first), or it exists
    when ``expected_version == -1`` asked for a create."""


class AlreadyExistsError(MetadataStoreError):
    """A create found the node there (used by the higher layers' named operations)."""


@dataclass(frozen=True)
class Stat:
    path: str  # the node's path (for a sequential put: the name actually made)
    version: int  # 0 when created, +1 per put
    creation_time_ms: int
    modification_time_ms: int
    ephemeral: bool
    created_by_self: bool  # an ephemeral node made by this store's session


@dataclass(frozen=True)
class GetResult:
    value: bytes
    stat: Stat


class NotificationType(enum.Enum):
    CREATED = "Created"
    MODIFIED = "Modified"
    DELETED = "Deleted"
    CHILDREN_CHANGED = "ChildrenChanged"


@dataclass(frozen=True)
class Notification:
    type: NotificationType
    path: str


class SessionEvent(enum.Enum):
    """Pulsar's ``SessionEvent``: the connection to the backend and the session behind it."""

    CONNECTION_LOST = "ConnectionLost"  # maybe temporary: the session (and ephemerals) may still live
    RECONNECTED = "Reconnected"  # same session: re-read cached values (notifications may be lost)
    SESSION_LOST = "SessionLost"  # the session expired: this store's ephemeral nodes are gone
    SESSION_REESTABLISHED = "SessionReestablished"  # a new session: re-create ephemerals, re-read all


class MetadataStore(Protocol):
    async def get(self, path: str, *, watch_missing: bool = True) -> GetResult | None:
        """The value and stat at ``path``, or None when it does not exist. ``watch_missing=False``: a node that is
        not there is not watched for its coming (a caller that asks once, or learns of it from a directory it
        lists); one that is there is watched as always."""
        ...

    async def get_children(self, path: str) -> list[str]:
        """The names (not paths) of the children of ``path``, sorted; [] when it does not exist."""
        ...

    async def exists(self, path: str, *, watch_missing: bool = True) -> bool:
        """Whether ``path`` exists; ``watch_missing`` as for ``get``."""
        ...

    async def put(self, path: str, value: bytes, expected_version: int | None, *,
                  ephemeral: bool = False, sequential: bool = False) -> Stat:
        """Create or replace the value at ``path`` (see the module docstring for versions)."""
        ...

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        """Delete ``path`` (it must have no children). Missing: NotFoundError; wrong version:
        BadVersionError."""
        ...

    async def delete_recursive(self, path: str) -> None:
        """Delete ``path`` and everything under it; nothing to delete is not an error."""
        ...

    def register_listener(self, listener: Callable[[Notification], None]) -> None:
        """Be told of changes (filter by path in the listener). Every backend tells of changes to
        the nodes this store has read (get, exists), the children of those it listed
        (get_children) and the nodes it wrote (put), from then on, whoever made them; the
        in-process backends tell of every change (ZooKeeper's watches are set by reads)."""
        ...

    def register_session_listener(self, listener: Callable[[SessionEvent], None]) -> None: ...

    async def close(self) -> None:
        """Stop: the session ends (ephemeral nodes go) and later calls raise MetadataStoreError."""
        ...
