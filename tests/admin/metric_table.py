"""The families table of docs/metrics.md, read for the tests: which families exist and when they appear."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from broker.admin.metric_families import FAMILIES

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
# The "here" codes a row may have (comma-separated), each a situation the tests set up.
CONDITIONS = {"always", "topic", "subscription", "producer", "consumer", "namespace", "idle", "ml", "cursor",
              "replication", "replicated subscription", "auth", "file", "non-persistent", "compaction",
              "transactions", "bookkeeper", "schema", "offload", "offload errors"}
_NAME = re.compile(r"^(pulsar_|process_|topic_load_|brk_ledgeroffloader_)[A-Za-z0-9_]+$")


@dataclass(frozen=True)
class Row:
    names: tuple[str, ...]  # concrete family names of the row
    kind: str
    meaning: str
    conditions: frozenset[str]  # empty for n/a and not-yet rows
    absent_reason: str  # "n/a: ..." or "not yet: ..." rows
    prefixes: tuple[str, ...] = ()  # the ``prefix_*`` wildcards of its family cell (families it covers by name)

    @property
    def may_be_negative(self) -> bool:
        return "-1" in self.meaning

    @property
    def may_be_nan(self) -> bool:
        """Pulsar's summaries of an interval without observations (the row says "NaN when ...")."""
        return "NaN" in self.meaning


def _names(cell: str) -> tuple[str, ...]:
    """Concrete names of a family cell: full names, "_suffix" shorthands of the row's first name,
    and for a "first … last" range every declared family sharing the first name's prefix."""
    tokens = [t.strip() for t in re.split(r"[,…]", cell) if t.strip()]
    if not tokens or not _NAME.match(tokens[0]):
        return ()
    first = tokens[0]
    out: list[str] = []
    for t in tokens:
        if _NAME.match(t):
            out.append(t)
        elif re.fullmatch(r"_[A-Za-z0-9_]+", t):
            prefix = first.split("_le_")[0] if "_le_" in first else first
            out.append(prefix + t)
    if "…" in cell and "_le_" in first:
        prefix = first.split("_le_")[0] + "_"
        out.extend(n for n in FAMILIES if n.startswith(prefix) and n not in out)
    return tuple(out)


def rows() -> list[Row]:
    text = DOC.read_text()
    section = text[text.index("## Every family"):]
    section = section[:section.index("\n## ", 1)]
    out = []
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| family") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 6, line
        family, kind, _labels, _unit, meaning, here = cells
        names = _names(family)
        if here.startswith(("n/a", "not yet")) or "*" in family:
            prefixes = tuple(w[:-1] for w in re.findall(r"[A-Za-z][A-Za-z0-9_]*_\*", family))
            out.append(Row(names, kind, meaning, frozenset(), here, prefixes))
            continue
        conditions = frozenset(c.strip() for c in here.split(","))
        assert conditions <= CONDITIONS, f"unknown condition in {line}"
        assert names, f"no family name in {line}"
        out.append(Row(names, kind, meaning, conditions, ""))
    return out


def expected(*situations: str) -> dict[str, Row]:
    """Family name -> its row, for every family that appears in any of these situations."""
    return {n: r for r in rows() if r.conditions & set(situations) for n in r.names}


_SAMPLE_SUFFIXES = ("_total", "_count", "_sum", "_bucket", "_created")


def documented(sample: str) -> bool:
    """Whether the table has a row for the family of this sample name (the family itself, or its ``_total``,
    ``_count``, ``_sum``, ``_bucket`` or ``_created`` sample): by name, or by a ``prefix_*`` of its family cell."""
    base = sample
    for suffix in _SAMPLE_SUFFIXES:
        base = base.removesuffix(suffix)
    names = {sample, base, *(base + suffix for suffix in _SAMPLE_SUFFIXES)}
    table = rows()
    return any(n in r.names or n.startswith(r.prefixes) for r in table for n in names)
