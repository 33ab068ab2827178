"""Protocol limits, each with the reason for its value."""

# Pulsar's default maxMessageSize (5 MiB). Advertised in CONNECTED; the C++ client enforces it on send.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024

# Pulsar's decoder accepts frames up to maxMessageSize plus this padding for the command and metadata.
FRAME_PADDING = 10 * 1024

# Every frame starts with totalSize:u32 then commandSize:u32.
FRAME_HEADER_SIZE = 8

# The smallest legal totalSize: the commandSize field itself (an empty command is still rejected later).
MIN_TOTAL_SIZE = 4

# Magic numbers that introduce optional sections of a payload command.
MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02

# Highest protocol version we speak (v20 = TopicMigrated, what C++ 4.2 sends).
MAX_PROTOCOL_VERSION = 20


def max_frame_size(max_message_size: int) -> int:
    """Largest totalSize+4 a peer may send before we close the connection (Pulsar's rule)."""
    return max_message_size + FRAME_PADDING
