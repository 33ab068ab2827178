"""String fields of a parsed protobuf message that are not valid UTF-8 (see ``mend_strings``)."""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

_STRING = FieldDescriptor.TYPE_STRING


def mend_strings(message: Message) -> None:
    """Decode as text, invalid sequences replaced by U+FFFD, the string fields the parser left as bytes.

    The protobuf runtime (upb) hands a proto2 ``string`` field that is not valid UTF-8 back as ``bytes``,
    where every handler expects ``str``. Pulsar's decoder reads such a field as Java's UTF-8 decoding does
    (malformed input replaced), so the command is answered as for that text.
    """
    for field, value in message.ListFields():
        if field.type == _STRING:
            if field.is_repeated:
                if any(type(v) is bytes for v in value):
                    mended = [v.decode("utf-8", "replace") if type(v) is bytes else v for v in value]
                    del value[:]
                    value.extend(mended)
            elif type(value) is bytes:
                setattr(message, field.name, value.decode("utf-8", "replace"))
        elif field.message_type is not None:
            if field.is_repeated:
                for item in value:
                    mend_strings(item)
            else:
                mend_strings(value)
