"""No import cycles between cloudlet's modules, counting the imports made inside functions (issue
26, item 6): a lazy import hides a cycle from the interpreter, not from the design. The graph is
grimp's (what ``lint-imports`` reads), every import it finds, at module level or in a function;
a group of modules that reach each other (a strongly connected component) is a cycle.

The only groups allowed are the ones in ``ALLOWED``, each with the work that removes it; a new
cycle fails here, and so does a listed one once it is gone (take it off the list)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest

ALLOWED: dict[frozenset[str], str] = {}  # none left (issue 26): keep it so


def import_graph(package: str) -> dict[str, set[str]]:
    """Each module of PACKAGE and the modules of PACKAGE it imports (anywhere in its code)."""
    graph = grimp.build_graph(package, cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def cycles(graph: Mapping[str, Iterable[str]]) -> set[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            node, edges = work[-1]
            child = next((w for w in edges if w not in index or w in on_stack), None)
            if child is not None and child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
                continue
            if child is not None:
                low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.add(frozenset(group))
    return found


def _describe(groups: Iterable[frozenset[str]]) -> str:
    return "\n".join("  " + ", ".join(sorted(g)) for g in sorted(groups, key=sorted))


def test_cloudlet_has_no_import_cycles_beyond_the_allowed() -> None:
    found = cycles(import_graph("cloudlet"))
    new, gone = found - set(ALLOWED), set(ALLOWED) - found
    assert not new, (
        "modules that import each other (counting imports inside functions):\n"
        f"{_describe(new)}\nmove what both need into a module below them, or pass it in as a "
        "parameter; do not hide the import in a function"
    )
    assert not gone, f"these allowed cycles are gone; take them off ALLOWED:\n{_describe(gone)}"


def test_cycles_finds_every_group_and_only_groups() -> None:
    graph = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a", "d"},  # a -> b -> c -> a
        "d": {"e"},
        "e": {"d"},  # d <-> e, reached from the first group
        "f": {"a"},  # imports a group, is in none
        "g": {"g"},  # a module importing itself is no cycle between modules
    }
    assert cycles(graph) == {frozenset("abc"), frozenset("de")}
    assert cycles({"a": {"b"}, "b": set()}) == set()


def test_an_import_inside_a_function_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "cyclepkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("from cyclepkg import high\n")
    (package / "high.py").write_text(
        textwrap.dedent(
            """\
            def later() -> None:
                from cyclepkg import low  # hidden from the interpreter, not from the graph
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cycles(import_graph("cyclepkg")) == {frozenset({"cyclepkg.low", "cyclepkg.high"})}
