"""The codec's one error type: the byte stream is not valid Pulsar framing."""


class ProtocolError(Exception):
    """Broken framing or an undecodable command. The connection that sent it must be closed."""
