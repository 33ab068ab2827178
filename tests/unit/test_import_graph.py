"""The import graph between packages: no cycle, and the lower floors import nothing above them.

Every module under ``broker/``, ``managed_ledger/``, ``metadata_store/`` and ``compression_codecs/`` is parsed
with ``ast`` (nothing is imported). Each import becomes an edge between *packages*: ``broker.<sub>`` for a
subpackage or a top-level module of ``broker`` (``broker.admin``, ``broker.service``, ``broker.server``,
``broker.config``...), ``broker`` for the package's own ``__init__`` (the public facade), and each of the other
three as a whole. Imports inside functions and inside ``if TYPE_CHECKING:`` count too: a type-only import is still
a design dependency (the importer must know the imported module's types), and a cycle hidden behind TYPE_CHECKING
is still a cycle a reader has to untangle.

Run ``python tests/unit/test_import_graph.py`` to print the graph.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP_PACKAGES = ("broker", "managed_ledger", "metadata_store", "compression_codecs")
ABOVE_DISPATCH = ("broker.service", "broker.admin", "broker.server", "broker.connection", "broker.auth",
                  "broker.metadata")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for top in TOP_PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def package_of(module: str) -> str | None:
    """The graph node of a module of ours (None for a module from outside the project)."""
    parts = module.split(".")
    if parts[0] in ("managed_ledger", "metadata_store", "compression_codecs"):
        return parts[0]
    if parts[0] != "broker":
        return None
    return "broker" if len(parts) == 1 else f"broker.{parts[1]}"


def _imported(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import in the module, wherever it is written."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # a relative import: resolve it against this module's package
                base = module.split(".")
                keep = len(base) - node.level + (1 if is_package else 0)
                target = ".".join(base[:keep] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                # `from broker import embedded` imports the submodule broker.embedded
                sub = f"{target}.{alias.name}"
                yield (sub if sub in MODULES else target), node.lineno


def import_edges() -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> where ("module:line"), for every edge between two
    different packages of ours."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module, path in MODULES.items():
        src = package_of(module)
        for target, line in _imported(module, path):
            dst = package_of(target)
            if src is None or dst is None or dst == src:
                continue
            edges.setdefault((src, dst), []).append(f"{module}:{line}")
    return edges


def imports_of(package: str) -> dict[str, list[str]]:
    """Every module this package imports (of ours or not), with where."""
    out: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        if package_of(module) != package:
            continue
        for target, line in _imported(module, path):
            out.setdefault(target, []).append(f"{module}:{line}")
    return out


def find_cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """The strongly connected components with more than one package (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for src, dst in edges:
        graph.setdefault(src, set()).add(dst)
        graph.setdefault(dst, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _describe(component: list[str], edges: dict[tuple[str, str], list[str]]) -> str:
    inside = set(component)
    lines = [f"  {src} -> {dst}  ({', '.join(where[:3])}{', ...' if len(where) > 3 else ''})"
             for (src, dst), where in sorted(edges.items()) if src in inside and dst in inside]
    return " / ".join(component) + ":\n" + "\n".join(lines)


def test_the_walk_sees_the_packages() -> None:
    """A guard for the test itself: the parse finds the packages and edges we know exist."""
    edges = import_edges()
    assert ("broker.service", "managed_ledger") in edges
    assert ("broker.server", "broker.admin") in edges
    assert {"broker.admin", "broker.service", "broker.dispatch", "broker.protocol",
            "broker.metadata", "broker.auth", "managed_ledger"} <= {p for e in edges for p in e}


def test_no_cycle_between_packages() -> None:
    cycles = find_cycles(import_edges())
    edges = import_edges()
    assert not cycles, "import cycles between packages:\n" + "\n".join(_describe(c, edges) for c in cycles)


def test_dispatch_imports_nothing_above_it() -> None:
    bad = {target: where for target, where in imports_of("broker.dispatch").items()
           if package_of(target) in ABOVE_DISPATCH}
    assert not bad, f"broker.dispatch imports from above it: {bad}"


def test_protocol_is_sans_io() -> None:
    """The codec imports no asyncio, and of the broker only itself (and the error types)."""
    bad = {target: where for target, where in imports_of("broker.protocol").items()
           if target.split(".")[0] == "asyncio"
           or package_of(target) not in (None, "broker.protocol", "broker.errors")}
    assert not bad, f"broker.protocol imports: {bad}"


def test_managed_ledger_knows_nothing_of_the_broker() -> None:
    bad = {target: where for target, where in imports_of("managed_ledger").items()
           if target.split(".")[0] == "broker"}
    assert not bad, f"managed_ledger imports from broker: {bad}"


if __name__ == "__main__":
    all_edges = import_edges()
    for (a, b), where in sorted(all_edges.items()):
        print(f"{a} -> {b}  ({len(where)}: {', '.join(where[:4])})")
    for cycle in find_cycles(all_edges):
        print("CYCLE", _describe(cycle, all_edges))


def test_metadata_store_stands_on_nothing_of_ours() -> None:
    """The metadata store is the floor under both the broker and the managed ledger."""
    bad = {target: where for target, where in imports_of("metadata_store").items()
           if target.split(".")[0] in ("broker", "managed_ledger")}
    assert not bad, f"metadata_store imports from broker or managed_ledger: {bad}"


def test_compression_codecs_stand_on_nothing_of_ours() -> None:
    """The codec table is the ground floor under both the broker and the managed ledger."""
    bad = {target: where for target, where in imports_of("compression_codecs").items()
           if package_of(target) is not None and package_of(target) != "compression_codecs"}
    assert not bad, f"compression_codecs imports from our packages: {bad}"
