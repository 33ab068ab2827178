"""The node tree the in-process backends stand on (``memory``, and ``local`` which journals it).

A change is made in two steps: ``plan_*`` checks it against the tree and returns the list of
low-level ``Op``s it amounts to (raising the contract's errors, changing nothing), then ``apply``
makes those ops and returns the notifications they cause. ``local`` writes the plan's persistent
ops to its journal between the two steps, so that what is on disk is always a prefix of what was
applied, and replays the same ops on open.

ZooKeeper's rules, kept here so the backends agree with it:
- a node is created with version 0, each write adds one; ``cversion`` counts the children ever
  created under it, and a sequential child is named after the parent's ``cversion`` at the moment
  it is made (ZooKeeper's PrepRequestProcessor names it so; deleting a child does not advance the
  count, as the contract suite checks against a real ZooKeeper 3.8);
- an ephemeral node belongs to one session (``owner``; 0 for a persistent node) and cannot have
  children;
- a create notifies CREATED on the node and CHILDREN_CHANGED on its parent, a write MODIFIED, a
  delete DELETED and CHILDREN_CHANGED on the parent.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from metadata_store import paths
from metadata_store.api import (
    BadVersionError,
    MetadataStoreError,
    NotFoundError,
    Notification,
    NotificationType,
    Stat,
)

PERSISTENT = 0  # the owner of a persistent node; sessions are numbered from 1
_session_ids = itertools.count(1)


def new_session_id() -> int:
    """A session number unique in this process (the owner of a session's ephemeral nodes)."""
    return next(_session_ids)


@dataclass
class Node:
    value: bytes
    version: int
    ctime_ms: int
    mtime_ms: int
    owner: int
    cversion: int = 0
    children: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Write:
    """Create or overwrite the node at ``path`` (its parent exists when this op is applied)."""

    path: str
    value: bytes
    version: int
    ctime_ms: int
    mtime_ms: int
    owner: int


@dataclass(frozen=True)
class Remove:
    path: str


@dataclass(frozen=True)
class Counter:
    """Raise the node's ``cversion`` to at least ``cversion``: what an ephemeral child's creation did
    to its parent, journalled although the child is not, so sequential names stay ZooKeeper's
    (and unique) across restarts."""

    path: str
    cversion: int


Op = Write | Remove | Counter


def is_persistent(op: Op) -> bool:
    return not isinstance(op, Write) or op.owner == PERSISTENT


class NodeTree:
    """Nodes by path, and the sessions attached to them (each told of every change).

    Plans and applies are made under ``lock`` by whoever changes the tree.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.nodes: dict[str, Node] = {paths.ROOT: Node(b"", 0, 0, 0, PERSISTENT)}
        self._sessions: dict[int, Callable[[list[Notification]], None]] = {}

    def attach(self, session: int, deliver: Callable[[list[Notification]], None]) -> None:
        with self.lock:
            self._sessions[session] = deliver

    def detach(self, session: int) -> None:
        with self.lock:
            self._sessions.pop(session, None)

    def broadcast(self, notes: list[Notification]) -> None:
        """Hand the notifications of one change to every attached session (which posts them to its loop)."""
        if notes:
            with self.lock:
                targets = list(self._sessions.values())
            for deliver in targets:
                deliver(notes)

    # ---- reads -------------------------------------------------------------------------------------------------

    def stat(self, path: str, session: int) -> Stat | None:
        node = self.nodes.get(path)
        return None if node is None else make_stat(path, node, session)

    def children(self, path: str) -> list[str]:
        node = self.nodes.get(path)
        return [] if node is None else sorted(node.children)

    # ---- plans -------------------------------------------------------------------------------------------------

    def plan_put(self, path: str, value: bytes, expected_version: int | None, *, owner: int, sequential: bool,
                 now_ms: int) -> tuple[list[Op], str]:
        """The ops of a put and the path it writes (for a sequential put: the name made)."""
        if path == paths.ROOT:
            raise MetadataStoreError("the root node cannot be written")
        if expected_version is not None and (type(expected_version) is not int or expected_version < -1):
            raise MetadataStoreError(f"expected_version must be None, -1 or a version >= 0: {expected_version}")
        ops: list[Op] = []
        parent_path = paths.parent(path)
        parent_cversion = 0
        for ancestor in paths.ancestors(path):
            node = self.nodes.get(ancestor)
            if node is None:
                ops.append(Write(ancestor, b"", 0, now_ms, now_ms, PERSISTENT))
            elif node.owner != PERSISTENT:
                raise MetadataStoreError(f"{ancestor} is ephemeral: ephemeral nodes cannot have children")
        parent = self.nodes.get(parent_path)
        if parent is not None:
            parent_cversion = parent.cversion
        if sequential:
            if expected_version not in (None, -1):
                raise MetadataStoreError("a sequential put creates a new node: expected_version must be None or -1")
            path = paths.sequential_name(path, parent_cversion)
        existing = self.nodes.get(path)
        if existing is None:
            if expected_version is not None and expected_version >= 0:
                raise NotFoundError(path)
            ops.append(Write(path, value, 0, now_ms, now_ms, owner))
            if owner != PERSISTENT:
                # the parent's count goes on past a restart although the ephemeral node does not
                ops.append(Counter(parent_path, parent_cversion + 1))
            return ops, path
        if expected_version == -1:
            raise BadVersionError(f"{path} exists (create-only put)")
        if expected_version is not None and expected_version != existing.version:
            raise BadVersionError(f"{path} is at version {existing.version}, not {expected_version}")
        if owner != existing.owner:
            # ZooKeeper keeps a node's mode (and owner) on setData; so do we.
            owner = existing.owner
        ops.append(Write(path, value, existing.version + 1, existing.ctime_ms, now_ms, owner))
        return ops, path

    def plan_delete(self, path: str, expected_version: int | None) -> list[Op]:
        if path == paths.ROOT:
            raise MetadataStoreError("the root node cannot be deleted")
        if expected_version is not None and type(expected_version) is not int:
            raise MetadataStoreError(f"expected_version must be None or an int: {expected_version!r}")
        node = self.nodes.get(path)
        if node is None:
            raise NotFoundError(path)
        if expected_version is not None and expected_version != -1 and expected_version != node.version:
            raise BadVersionError(f"{path} is at version {node.version}, not {expected_version}")
        if node.children:
            raise MetadataStoreError(f"{path} has children ({len(node.children)}): delete them first")
        return [Remove(path)]

    def plan_delete_recursive(self, path: str) -> list[Op]:
        """Removes of ``path`` and everything under it, children before parents; [] when missing."""
        if path not in self.nodes:
            return []
        ops: list[Op] = []

        def visit(p: str) -> None:
            for child in sorted(self.nodes[p].children):
                visit(paths.join(p, child))
            if p != paths.ROOT:
                ops.append(Remove(p))

        visit(path)
        return ops

    def plan_expire(self, owner: int) -> list[Op]:
        """Removes of every ephemeral node of a session (they have no children)."""
        return [Remove(p) for p, node in self.nodes.items() if node.owner == owner and owner != PERSISTENT]

    # ---- apply -------------------------------------------------------------------------------------------------

    def apply(self, ops: list[Op]) -> list[Notification]:
        notes: list[Notification] = []
        for op in ops:
            if isinstance(op, Write):
                node = self.nodes.get(op.path)
                if node is None:
                    parent_path = paths.parent(op.path)
                    parent = self.nodes[parent_path]
                    parent.children.add(paths.name(op.path))
                    parent.cversion += 1
                    self.nodes[op.path] = Node(op.value, op.version, op.ctime_ms, op.mtime_ms, op.owner)
                    notes.append(Notification(NotificationType.CREATED, op.path))
                    notes.append(Notification(NotificationType.CHILDREN_CHANGED, parent_path))
                else:
                    node.value, node.version, node.mtime_ms, node.owner = op.value, op.version, op.mtime_ms, op.owner
                    notes.append(Notification(NotificationType.MODIFIED, op.path))
            elif isinstance(op, Remove):
                if self.nodes.pop(op.path, None) is None:
                    continue
                parent_path = paths.parent(op.path)
                parent = self.nodes[parent_path]
                parent.children.discard(paths.name(op.path))
                notes.append(Notification(NotificationType.DELETED, op.path))
                notes.append(Notification(NotificationType.CHILDREN_CHANGED, parent_path))
            else:
                counted = self.nodes.get(op.path)
                if counted is not None:
                    counted.cversion = max(counted.cversion, op.cversion)
        return notes


def make_stat(path: str, node: Node, session: int) -> Stat:
    ephemeral = node.owner != PERSISTENT
    return Stat(path, node.version, node.ctime_ms, node.mtime_ms, ephemeral, ephemeral and node.owner == session)
