"""The BookKeeper client's errors."""

from __future__ import annotations

from managed_ledger.bookkeeper.protocol import StatusCode


class BookKeeperError(Exception):
    """Base of the client's errors."""


class LedgerFencedError(BookKeeperError):
    """Another client fenced (is recovering or recovered) the ledger: this writer may not add any more."""


class LedgerClosedError(BookKeeperError):
    """The ledger is closed (by this writer, or by someone who recovered it)."""


class NoSuchLedgerError(BookKeeperError):
    pass


class NotEnoughBookiesError(BookKeeperError):
    pass


class UnauthorizedError(BookKeeperError):
    """Wrong password for the ledger (or a bookie refused the master key)."""


class EntryReadError(BookKeeperError):
    """No bookie of the entry's write set returned it."""


class MetadataConflictError(BookKeeperError):
    """The ledger's metadata changed in a way this operation cannot accept (e.g. closed at another point)."""


def status_name(status: StatusCode | int) -> str:
    return status.name if isinstance(status, StatusCode) else f"rc={status}"
