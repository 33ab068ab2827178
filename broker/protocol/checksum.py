"""CRC32C (Castagnoli) as used by Pulsar payload checksums."""

import crc32c as _crc32c


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """Chainable: crc32c(b, crc32c(a)) == crc32c(a + b)."""
    return int(_crc32c.crc32c(data, value))
