"""Paths of the metadata store: absolute, ``/``-separated, no trailing slash (ZooKeeper's rules).

A bad path is the caller's mistake and gets ``InvalidPathError`` (a ``MetadataStoreError``) at once,
in every backend alike, before anything is sent or written.
"""

from __future__ import annotations

from metadata_store.api import MetadataStoreError

ROOT = "/"
# ZooKeeper appends a 10-digit zero-padded counter to a sequential node's name ("%010d").
SEQUENCE_DIGITS = 10


class InvalidPathError(MetadataStoreError):
    """The path is not absolute, has an empty, ``.`` or ``..`` element, a trailing slash or a NUL."""


def check(path: str) -> str:
    """``path`` itself when valid, else InvalidPathError saying why."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidPathError(f"a path must be a string starting with '/': {path!r}")
    if path == ROOT:
        return path
    if path.endswith("/"):
        raise InvalidPathError(f"a path must not end with '/': {path!r}")
    if "\x00" in path:
        raise InvalidPathError(f"a path must not contain NUL: {path!r}")
    for element in path[1:].split("/"):
        if element in ("", ".", ".."):
            raise InvalidPathError(f"a path must not have an empty, '.' or '..' element: {path!r}")
    return path


def parent(path: str) -> str:
    """The parent of a valid path other than the root."""
    head = path.rsplit("/", 1)[0]
    return head or ROOT


def name(path: str) -> str:
    """The last element of a valid path."""
    return path.rsplit("/", 1)[1]


def join(parent_path: str, child: str) -> str:
    return f"{parent_path}/{child}" if parent_path != ROOT else f"/{child}"


def ancestors(path: str) -> list[str]:
    """The proper ancestors of a valid path, root excluded, from the top down: /a/b/c -> [/a, /a/b]."""
    elements = path[1:].split("/")[:-1] if path != ROOT else []
    return ["/" + "/".join(elements[: i + 1]) for i in range(len(elements))]


def sequential_name(path: str, counter: int) -> str:
    return f"{path}{counter:0{SEQUENCE_DIGITS}d}"
