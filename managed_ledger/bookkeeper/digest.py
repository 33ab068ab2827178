"""BookKeeper's entry format and digests (sans-IO).

An entry, as a writer sends it and a bookie stores it verbatim (v2 and v3 protocols alike)::

    i64 ledgerId | i64 entryId | i64 lastAddConfirmed | i64 length | digest[D] | payload

`lastAddConfirmed` is the writer's LAC when it sent the entry (-1 if none): readers learn the LAC from it.
`length` is the ledger's length in payload bytes including this entry. The digest covers the 32 header bytes then the
payload. D depends on the ledger's digest type, recorded in its metadata: CRC32C = 4 bytes (big-endian int, what
Pulsar uses), CRC32 = 8 bytes (big-endian long, upper half zero), HMAC = 20 bytes (HmacSHA1 keyed by
SHA1("mac" + password)), DUMMY = 0 bytes.

The master key a writer presents to bookies is SHA1("ledger" + password), not the password itself.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import crc32c

HEADER = struct.Struct(">qqqq")
# BookKeeper's METADATA_LENGTH: the 4 longs in front of the digest.
HEADER_LENGTH = HEADER.size
# The fixed master key length in the v2 protocol (an SHA-1 digest).
MASTER_KEY_LENGTH = 20
# LAC of a ledger with no confirmed entry yet, and "no entry" in general (BookKeeper's INVALID_ENTRY_ID).
INVALID_ENTRY_ID = -1


class DigestType(enum.IntEnum):
    """The ledger metadata's digestType enum values (DataFormats.proto)."""

    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4


DIGEST_LENGTH = {DigestType.CRC32: 8, DigestType.HMAC: 20, DigestType.CRC32C: 4, DigestType.DUMMY: 0}


class DigestError(ValueError):
    """An entry failed verification: bad digest, wrong ledger/entry id, or too short."""


def master_key(password: bytes) -> bytes:
    """The key a ledger's writer (and fencing reader) sends to bookies; empty password -> SHA1(b"ledger")."""
    return hashlib.sha1(b"ledger" + password).digest()


_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


def _crc32c(header: bytes, payload: bytes | memoryview) -> bytes:
    return _U32.pack(crc32c.crc32c(payload, crc32c.crc32c(header)))


def _crc32(header: bytes, payload: bytes | memoryview) -> bytes:
    return _U64.pack(zlib.crc32(payload, zlib.crc32(header)))


def _dummy(header: bytes, payload: bytes | memoryview) -> bytes:
    return b""


@dataclass(frozen=True)
class EntryFrame:
    """A verified entry: its header fields and payload."""

    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    length: int
    payload: bytes


class Digester:
    """Computes and checks one ledger's digests (its type and password come from the ledger metadata)."""

    def __init__(self, digest_type: DigestType, password: bytes = b"") -> None:
        self.digest_type = digest_type
        self.digest_length = DIGEST_LENGTH[digest_type]
        self._mac_key = hashlib.sha1(b"mac" + password).digest()
        # (Chosen once: the publish path computes one digest per entry. CRC32C over the header then the payload:
        # two calls into the C extension, no copy of the payload.)
        self._digest: Callable[[bytes, bytes | memoryview], bytes] = {
            DigestType.CRC32C: _crc32c, DigestType.CRC32: _crc32, DigestType.HMAC: self._hmac,
            DigestType.DUMMY: _dummy}[digest_type]

    def _hmac(self, header: bytes, payload: bytes | memoryview) -> bytes:
        mac = hmac.new(self._mac_key, header, hashlib.sha1)
        mac.update(payload)
        return mac.digest()

    def head(self, ledger_id: int, entry_id: int, last_add_confirmed: int, length: int,
             payload: bytes | memoryview) -> bytes:
        """An entry's bytes before its payload: the header and the digest (`package` without the payload)."""
        header = HEADER.pack(ledger_id, entry_id, last_add_confirmed, length)
        return header + self._digest(header, payload)

    def package(self, ledger_id: int, entry_id: int, last_add_confirmed: int, length: int,
                payload: bytes | memoryview) -> bytes:
        """The entry bytes to send to bookies."""
        return self.head(ledger_id, entry_id, last_add_confirmed, length, payload) + bytes(payload)

    def verify(self, data: bytes | memoryview, ledger_id: int, entry_id: int | None) -> EntryFrame:
        """Check an entry read from a bookie; `entry_id=None` skips the entry id check (LAC reads of entry -1)."""
        view = memoryview(data)
        if len(view) < HEADER_LENGTH + self.digest_length:
            raise DigestError(f"entry of {len(view)} bytes is shorter than its header and digest")
        header = view[:HEADER_LENGTH]
        got_ledger, got_entry, lac, length = HEADER.unpack(header)
        digest_end = HEADER_LENGTH + self.digest_length
        payload = view[digest_end:]
        if not hmac.compare_digest(self._digest(header.tobytes(), payload), view[HEADER_LENGTH:digest_end]):
            raise DigestError(f"digest mismatch for ledger {got_ledger} entry {got_entry}")
        if got_ledger != ledger_id:
            raise DigestError(f"entry of ledger {got_ledger} where ledger {ledger_id} was expected")
        if entry_id is not None and got_entry != entry_id:
            raise DigestError(f"entry {got_entry} where entry {entry_id} was expected")
        return EntryFrame(got_ledger, got_entry, lac, length, payload.tobytes())
