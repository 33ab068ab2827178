"""How Pulsar's Java code writes times and client addresses in its admin JSON and wire answers, for ours to
write them the same way."""

from __future__ import annotations

import math


def iso_time(epoch_s: float) -> str:
    """Pulsar's DateFormatter format: ISO-8601 UTC with milliseconds, e.g. 2026-11-29T12:00:00.123Z."""
    return iso_time_ms(math.floor(epoch_s * 1000))


def iso_time_ms(epoch_ms: int) -> str:
    """``iso_time`` of a time in milliseconds. A time a client set (a message's publish, event or delivery time) is
    any 64-bit number, so this is calendar arithmetic, not Python's datetime (years 1-9999 only): the proleptic
    Gregorian calendar, as java.time's, and the year written as its ISO formatter writes it (signed past 9999 and
    before 0). The milliseconds as ISO_OFFSET_DATE_TIME writes them: as few digits as they need (``.39``), none
    when zero (``2026-12-05T00:00:00Z``)."""
    days, ms = divmod(epoch_ms, 86_400_000)
    z = days + 719_468  # days since 0000-03-01
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    sign = "+" if year > 9999 else "-" if year < 0 else ""
    seconds, milli = divmod(ms, 1000)
    fraction = f".{milli:03d}".rstrip("0") if milli else ""
    return (f"{sign}{abs(year):04d}-{month:02d}-{day:02d}T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:"
            f"{seconds % 60:02d}{fraction}Z")


def client_address(address: str) -> str:
    """A client's ``host:port`` as Pulsar's stats write it (Java's InetSocketAddress: ``/127.0.0.1:43968``)."""
    return "/" + address
