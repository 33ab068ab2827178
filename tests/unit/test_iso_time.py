"""broker/admin/stats.py's iso_time_ms: Pulsar's DateFormatter format for any 64-bit time in milliseconds
(DateTimeFormatter.ISO_OFFSET_DATE_TIME in UTC: the expected strings below are what Java 17 prints)."""

from __future__ import annotations

import datetime as dt
import random

from broker.java_text import iso_time, iso_time_ms


def _by_datetime(ms: int) -> str:
    when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)
    milli = when.microsecond // 1000
    fraction = f".{milli:03d}".rstrip("0") if milli else ""
    return (f"{when.year:04d}-{when.month:02d}-{when.day:02d}T{when.hour:02d}:{when.minute:02d}:{when.second:02d}"
            f"{fraction}Z")


def test_the_calendar_arithmetic_agrees_with_datetime_where_datetime_reaches() -> None:
    rng = random.Random(20261204)
    for ms in [0, 1, 999, 86_399_999, 951_782_400_000, -1, -62_135_596_800_000, 253_402_300_799_999,
               *(rng.randrange(-62_135_596_800_000, 253_402_300_800_000) for _ in range(2000))]:
        assert iso_time_ms(ms) == _by_datetime(ms), ms
    assert iso_time(1_764_844_800.1234) == "2025-12-04T10:40:00.123Z"
    # As Java prints them: trailing zeros of the milliseconds dropped, no fraction for none.
    assert iso_time_ms(1_764_844_800_390) == "2025-12-04T10:40:00.39Z"
    assert iso_time_ms(1_764_844_800_300) == "2025-12-04T10:40:00.3Z"
    assert iso_time_ms(0) == "1970-01-01T00:00:00Z"


def test_years_past_9999_and_before_0_are_signed_as_java_writes_them() -> None:
    assert iso_time_ms(253_402_300_800_000) == "+10000-01-01T00:00:00Z"
    assert iso_time_ms((1 << 63) - 1) == "+292278994-08-17T07:12:55.807Z"  # Long.MAX_VALUE (Instant.ofEpochMilli)
    assert iso_time_ms(-62_167_219_200_000) == "0000-01-01T00:00:00Z"
    assert iso_time_ms(-62_167_219_200_001) == "-0001-12-31T23:59:59.999Z"
