"""Comparing an admin answer of ours with Apache Pulsar's: the HTTP call and the JSON's shape (its key paths, names
made generic, each with the kind of value there). Used by test_pulsar_shapes.py and the transactions' equivalent."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from broker.embedded import BrokerThread
from cluster import apache_pulsar
from tests.needs import unavailable

Answers = dict[str, tuple[int, Any]]
# (the broker's service URL, its web URL, its /metrics path) -> what it answered, by call
Ask = Callable[[str, str, str], Answers]


def ask_both(workdir: Path, ask: Ask, pulsar_settings: str = "", **our_settings: Any) -> dict[str, Answers]:
    """``ask`` of a Pulsar 4.0.7 standalone (``pulsar_settings``: lines for its configuration), then of our broker
    (``our_settings``): {"pulsar": ..., "ours": ...}. Skips (fails under CI=true) without Pulsar's jars."""
    why = apache_pulsar.missing_dependencies()
    if why is not None:
        unavailable(f"Apache Pulsar unavailable: {why}")
    theirs = apache_pulsar.start_standalone(workdir / "pulsar", settings=pulsar_settings)
    try:
        pulsar_answers = ask(f"pulsar://127.0.0.1:{theirs.port}", theirs.web_url, "/metrics/")
    finally:
        theirs.stop()
    with BrokerThread(data_dir=workdir / "ours", **our_settings) as ours:
        return {"pulsar": pulsar_answers, "ours": ask(ours.service_url, ours.web_url, "/metrics")}


def _generic(key: str) -> str:
    """A key that is a name (topic, subscription, bundle, broker, cluster, partition, the broker's own readers and
    cursors) as ``<name>``."""
    names = ("://", "public/", "0x", "127.0.0.1", "standalone", "-partition-")
    return "<name>" if any(n in key for n in names) or key in ("s", "ks", "n", "sub") or key.startswith("__") else key


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return {str: "string", list: "list", dict: "object", type(None): "null"}[type(value)]


def shape(value: Any, prefix: str = "") -> dict[str, str]:
    """Key path -> the kind of value there (list items merged into ``[]``)."""
    out = {prefix: _kind(value)} if prefix else {}
    if isinstance(value, dict):
        for k, v in value.items():
            out.update(shape(v, f"{prefix}.{_generic(k)}"))
    elif isinstance(value, list):
        for v in value:
            out.update(shape(v, prefix + "[]"))
    return out


def assert_same_shape(ours: Any, theirs: Any, only_ours_allowed: AbstractSet[str] = frozenset(),
                      only_theirs_allowed: AbstractSet[str] = frozenset()) -> None:
    """The same key paths (but those allowed) and, where both hold a value, the same kind (null goes with any)."""
    our_shape, their_shape = shape(ours), shape(theirs)
    only_ours = set(our_shape) - set(their_shape) - only_ours_allowed
    only_theirs = set(their_shape) - set(our_shape) - only_theirs_allowed
    assert not only_ours and not only_theirs, (f"keys only ours has: {sorted(only_ours)}; "
                                               f"only Pulsar's: {sorted(only_theirs)}")
    kinds = {k: (our_shape[k], their_shape[k]) for k in set(our_shape) & set(their_shape)
             if our_shape[k] != their_shape[k] and "null" not in (our_shape[k], their_shape[k])}
    assert not kinds, f"values of another kind (ours, Pulsar's): {kinds}"
    assert type(ours) is type(theirs)


def request(web_url: str, method: str, path: str, body: Any = None) -> tuple[int, str]:
    """One admin call: (status, the answer's text), an error status included."""
    req = urllib.request.Request(web_url + path, method=method, data=None if body is None else json.dumps(
        body).encode(), headers={} if body is None else {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def json_or(text: str, otherwise: Any) -> Any:
    try:
        return json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        return otherwise


def get(web_url: str, path: str) -> tuple[int, Any]:
    """A GET's status and JSON (a plain-text answer as text; an error's body left out)."""
    status, text = request(web_url, "GET", path)
    return status, (json_or(text, text) if status < 400 else None)


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+\S+')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text: str) -> dict[str, list[dict[str, str]]]:
    """Sample name -> the label sets of its samples, from the Prometheus text format."""
    out: dict[str, list[dict[str, str]]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and (m := _SAMPLE.match(line)):
            out.setdefault(m.group(1), []).append(dict(_LABEL.findall(m.group(2) or "")))
    return out
