"""CRC32C (Castagnoli) as used by Pulsar payload checksums.

``crc32c(data, value=0)`` is chainable: ``crc32c(b, crc32c(a)) == crc32c(a + b)``. It is the C
function itself, not a wrapper: it runs a few times per message on the publish path.
"""

from collections.abc import Callable
from typing import cast

import crc32c as _crc32c

crc32c = cast(Callable[..., int], _crc32c.crc32c)
