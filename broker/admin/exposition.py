"""Prometheus text exposition (format 0.0.4), written directly: one list of lines per family.

Each family is declared once in ``FAMILIES`` (name, type, help); a scrape appends sample lines to
its family. ``flush()`` (called by the writer at every slice of a long scrape) turns each family's
pending lines into one encoded part and drops them, so no list ever holds more than a slice's
lines: the young-generation garbage collections of a 10,000-topic scrape no longer walk lists of
hundreds of thousands of lines (a gen-1 collection took ~40 ms of CPU), and the ~900,000 line
strings are freed a slice at a time instead of all at once when the scrape ends (~75 ms of CPU in
one go, a stall of the loop). Label strings are built by the caller, which can keep a topic's
``cluster="..",namespace="..",topic=".."`` prefix from one scrape to the next: the label
formatting is a good part of the cost at 10,000 topics.

Every family is declared under its sample name (in the 0.0.4 text format a counter's TYPE line
names it with its ``_total``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

COUNTER = "counter"
GAUGE = "gauge"
HISTOGRAM = "histogram"
SUMMARY = "summary"


def escape(value: str) -> str:
    """A label value escaped as the text format wants it."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def fmt(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


class Exposition:
    """The families of one scrape, in first-use order."""

    def __init__(self, families: dict[str, tuple[str, str]]) -> None:
        self._declared = families
        self._lines: dict[str, list[str]] = {}  # pending lines (the header first until the first flush)
        self._parts: dict[str, list[bytes]] = {}  # flushed text of families that have samples
        self._given: set[str] = set()  # families whose text chunks() gave out
        self._groups: dict[tuple[str, ...], list[list[str]]] = {}

    def family(self, name: str) -> list[str]:
        """The sample lines of family ``name`` (its header first), to append ``name{labels} value\\n``
        lines to directly: what a writer of many series per topic does instead of one ``add`` each."""
        lines = self._lines.get(name)
        if lines is None:
            lines = self._lines[name] = [self._header(name)]
        return lines

    def families(self, names: tuple[str, ...]) -> list[list[str]]:
        """``family`` of each name (looked up once per scrape for a given tuple)."""
        group = self._groups.get(names)
        if group is None:
            group = self._groups[names] = [self.family(name) for name in names]
        return group

    def add(self, name: str, labels: str, value: float) -> None:
        """One sample. ``value`` is an int or a float (never a bool): ``repr`` writes both as the text
        format reads them (a float's shortest round-trip form; ``nan`` / ``inf`` are accepted too)."""
        lines = self._lines.get(name)
        if lines is None:
            lines = self._lines[name] = [self._header(name)]
        lines.append(f"{name}{{{labels}}} {value!r}\n")

    def histogram(self, name: str, labels: str, cumulative: list[tuple[float, int]], count: int,
                  total: float) -> None:
        """A Prometheus histogram: ``cumulative`` is (upper bound, observations <= it), +Inf last."""
        lines = self._lines.get(name)
        if lines is None:
            lines = self._lines[name] = [self._header(name)]
        sep = "," if labels else ""
        for bound, n in cumulative:
            le = "+Inf" if math.isinf(bound) else repr(float(bound))
            lines.append(f'{name}_bucket{{{labels}{sep}le="{le}"}} {n}\n')
        lines.append(f"{name}_count{{{labels}}} {count}\n")
        lines.append(f"{name}_sum{{{labels}}} {fmt(float(total))}\n")

    def summary(self, name: str, labels: str, quantiles: list[tuple[float, float]], count: int,
                total: float) -> None:
        """A Prometheus summary: ``quantiles`` is (quantile, value); NaN for a quantile of nothing."""
        lines = self._lines.get(name)
        if lines is None:
            lines = self._lines[name] = [self._header(name)]
        sep = "," if labels else ""
        for q, v in quantiles:
            lines.append(f'{name}{{{labels}{sep}quantile="{q!r}"}} {fmt(v)}\n')
        lines.append(f"{name}_count{{{labels}}} {count}\n")
        lines.append(f"{name}_sum{{{labels}}} {fmt(float(total))}\n")

    def _flush(self, name: str, lines: list[str]) -> None:
        # A family's lines are only its header until its first sample: such a family is left as it is.
        if len(lines) > 1 or (lines and name in self._parts):
            self._parts.setdefault(name, []).append("".join(lines).encode())
            lines.clear()

    def flush(self) -> None:
        """Encode every family's pending lines into a part and let the lines go (the lists stay, so
        writers holding them from ``family`` / ``families`` keep appending)."""
        for name, lines in self._lines.items():
            if lines:
                self._flush(name, lines)

    def names(self) -> list[str]:
        return [name for name, lines in self._lines.items()
                if name in self._parts or name in self._given or len(lines) > 1]

    def text(self) -> str:
        return b"".join(self.chunks()).decode()

    def chunks(self) -> Iterator[bytes]:
        """The text family by family (a few MB at most at 10,000 topics), for streaming; families
        without a sample are left out. Each family's text is let go once given out."""
        for name, lines in self._lines.items():
            self._flush(name, lines)
            parts = self._parts.pop(name, None)
            if parts:
                self._given.add(name)
                yield parts[0] if len(parts) == 1 else b"".join(parts)

    def _header(self, name: str) -> str:
        kind, doc = self._declared[name]
        return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"
