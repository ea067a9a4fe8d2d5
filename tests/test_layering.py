"""The package layering of ``src/kgeval``, enforced: no upward import and no cycle between units.

Every module is parsed with :mod:`ast`; every import of a ``kgeval`` module counts, at module level
and deferred inside a function alike (a deferred import hides a dependency from the reader, it does
not remove it). Relative imports are resolved. Third-party imports are ignored.

A *unit* is a package of ``kgeval`` (``evaluation``, ``workflow``, ...) or a top-level module
(``triples``, ``ranks``, ...), except ``significance``, which holds two layers: the statistics on
rank tables and metric values sit below ``results``; the comparisons of models (``compare``,
``align``, ``adjust``) sit above it, and the null model of a dataset between them.

Rules:

1. an import may go down the layers, or stay inside its unit;
2. between two units of one layer, an import is allowed unless the pair is in ``NOT_PEERS``
   (``evaluation`` and ``models`` implement two sides of one protocol and import neither each other);
3. the graph of units has no cycle.
"""

from __future__ import annotations

import ast
import functools
import pathlib
from collections import defaultdict
from dataclasses import dataclass

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "kgeval"

#: (module prefix, unit, layer); the longest matching prefix wins.
UNITS = [
    # L0 core: errors, checks, JSON, text, threads, CSR arrays, duck typing, partitions, tensors, formatting,
    # the protocol presets' table (data only)
    *((f"kgeval.{m}", m, 0) for m in (
        "errors", "_validation", "_json", "_textio", "_threads", "_csr", "_compat", "_partition", "_tensor",
        "_format", "_escape", "_version", "keys", "triples", "presets")),
    # L1: rank tables and their files, the protocol record, metrics, statistics on ranks and values, the
    # index of known answers (used by the evaluator and the null model)
    ("kgeval.ranks", "ranks", 1),
    ("kgeval.filtering", "filtering", 1),
    ("kgeval.rankfile", "ranks", 1),
    ("kgeval.protocol", "protocol", 1),
    ("kgeval.metrics", "metrics", 1),
    ("kgeval.significance", "significance", 1),
    ("kgeval.breakdowns", "breakdowns", 1),  # groups of tasks (relation categories, degrees) from id triples
    # L2: datasets; Results (values from rank tables)
    ("kgeval.data", "data", 2),
    ("kgeval.results", "results", 2),
    # L3: the evaluator and the built-in scorers (peers)
    ("kgeval.evaluation", "evaluation", 3),
    ("kgeval.models", "models", 3),
    # L4: training (evaluates); the null model of a dataset (reads datasets, counts with the filter index);
    # the experiment trackers (receive plain values and duck-typed results; import only the core)
    ("kgeval.training", "training", 4),
    ("kgeval.tracking", "tracking", 4),
    ("kgeval.significance.candidates", "null_model", 4),
    ("kgeval.significance.null_model", "null_model", 4),
    ("kgeval.significance.null_tables", "null_model", 4),
    # L5: configuration, pipeline and run directories; foreign formats; comparisons of Results
    ("kgeval.workflow", "workflow", 5),
    ("kgeval.interop", "interop", 5),
    ("kgeval.significance.compare", "comparisons", 5),
    ("kgeval.significance.align", "comparisons", 5),
    ("kgeval.significance.adjust", "comparisons", 5),
    ("kgeval.significance.compare_groups", "comparisons", 5),
    # L6: reports and the command line
    ("kgeval.report", "report", 6),
    ("kgeval.cli", "cli", 6),
    # L7: the package facade (lazy re-exports of the public API)
    ("kgeval", "kgeval", 7),
]

#: Pairs of units of one layer where the first must not import the second.
NOT_PEERS = {
    ("evaluation", "models"), ("models", "evaluation"),
    ("interop", "workflow"), ("interop", "comparisons"),  # readers and converters are below the runs
    ("comparisons", "workflow"), ("comparisons", "interop"),  # comparisons take Results, not run directories
    ("training", "null_model"), ("null_model", "training"),
}

#: Edges that break the rules today and are fixed by parallel work on ``evaluation/`` (the lead removes
#: each entry when the change that fixes it is merged): (importing module, imported module).
ALLOWED: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Edge:
    source: str  # importing module
    target: str  # imported module
    path: str  # the file, relative to the folder above the package (``src/kgeval/...``)
    line: int
    deferred: bool

    def where(self) -> str:
        kind = "deferred import" if self.deferred else "import"
        return f"{self.path}:{self.line}: {kind} of {self.target}"


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: pathlib.Path, root: pathlib.Path, modules: set[str]) -> list[Edge]:
    """Every import of a ``kgeval`` module in the file at ``path``, with its line and whether it is
    inside a function."""
    source = module_name(path, root)
    package = source.split(".") if path.name == "__init__.py" else source.split(".")[:-1]
    shown = path.relative_to(root.parents[1]).as_posix()
    edges: list[Edge] = []

    def visit(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = deferred or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            targets: list[str] = []
            if isinstance(child, ast.Import):
                targets = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package[:len(package) - child.level + 1]
                    module = ".".join(base + ([child.module] if child.module else []))
                else:
                    module = child.module or ""
                # ``from . import x`` imports the submodule x where there is one
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in child.names]
            for target in dict.fromkeys(targets):
                if target == "kgeval" or target.startswith("kgeval."):
                    edges.append(Edge(source, target, shown, child.lineno, inner))
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), False)
    return edges


@functools.lru_cache(maxsize=None)
def _package_imports(root: pathlib.Path) -> tuple[Edge, ...]:
    files = sorted(root.rglob("*.py"))
    modules = {module_name(p, root) for p in files}
    return tuple(edge for p in files for edge in imports_of(p, root, modules))


def all_imports(root: pathlib.Path = SRC) -> list[Edge]:
    """Every import of a ``kgeval`` module in the package at ``root`` (parsed once per root)."""
    return list(_package_imports(root))


def unit_of(module: str) -> tuple[str, int]:
    best = max((prefix for prefix, _, _ in UNITS if module == prefix or module.startswith(prefix + ".")), key=len,
               default=None)
    if best is None:
        raise AssertionError(f"module {module} is in no layer: add it to UNITS in {__file__}")
    return next((unit, layer) for prefix, unit, layer in UNITS if prefix == best)


def violations(edges: list[Edge], allowed=ALLOWED) -> list[str]:
    """One line per import that goes up a layer or sideways between two units that are not peers."""
    out = []
    for e in edges:
        (su, sl), (tu, tl) = unit_of(e.source), unit_of(e.target)
        if su == tu or (e.source, e.target) in allowed:
            continue
        if tl > sl:
            out.append(f"{e.where()}: {su} (L{sl}) imports {tu} (L{tl}), a higher layer")
        elif tl == sl and (su, tu) in NOT_PEERS:
            out.append(f"{e.where()}: {su} and {tu} are both L{sl} and {su} must not import {tu}")
    return out


def unit_cycles(edges: list[Edge], allowed=ALLOWED, key=lambda module: unit_of(module)[0]) -> list[list[str]]:
    """The strongly connected components of more than one unit (Tarjan), each sorted; ``key=str`` gives
    those of modules."""
    graph: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        su, tu = key(e.source), key(e.target)
        if su != tu and (e.source, e.target) not in allowed:
            graph[su].add(tu)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while component[-1:] != [v]:
                component.append(stack.pop())
            if len(component) > 1:
                components.append(sorted(component))

    for v in list(graph):
        if v not in index:
            connect(v)
    return components


def cycle_edges(edges: list[Edge], component: list[str], allowed=ALLOWED) -> list[str]:
    return [f"{e.where()} ({unit_of(e.source)[0]} -> {unit_of(e.target)[0]})" for e in edges
            if unit_of(e.source)[0] in component and unit_of(e.target)[0] in component
            and unit_of(e.source)[0] != unit_of(e.target)[0] and (e.source, e.target) not in allowed]


def test_every_module_has_a_layer():
    for e in all_imports():
        unit_of(e.source), unit_of(e.target)


def test_no_upward_or_forbidden_sideways_import():
    found = violations(all_imports())
    assert not found, "imports against the layer order (see UNITS in tests/test_layering.py):\n" + "\n".join(found)


def test_no_cycle_between_units():
    edges = all_imports()
    cycles = unit_cycles(edges)
    assert not cycles, "\n".join(f"import cycle between {c}:\n  " + "\n  ".join(cycle_edges(edges, c)) for c in cycles)


#: Module cycles inside one unit that are known and fixed elsewhere; a cycle outside these fails.
KNOWN_MODULE_CYCLES = [
    # a facade: RankTable.save / load / read delegate to the file format module, as pandas' to_csv does
    {"kgeval.ranks", "kgeval.rankfile"},
    # a facade like the first: Model.shard delegates to models.shard, whose EntityShard wraps a Model
    {"kgeval.models.base", "kgeval.models.shard"},
]


def test_no_new_module_cycle():
    edges = all_imports()
    new = [c for c in unit_cycles(edges, key=str) if not any(set(c) <= known for known in KNOWN_MODULE_CYCLES)]
    assert not new, "\n".join(f"import cycle between the modules {c}:\n  " + "\n  ".join(
        e.where() for e in edges if e.source in c and e.target in c and e.source != e.target) for c in new)


def test_allowed_exceptions_are_still_needed():
    """An entry of ALLOWED whose import is gone must be removed, so the list only shrinks."""
    present = {(e.source, e.target) for e in all_imports()}
    stale = sorted(ALLOWED - present)
    assert not stale, f"remove these from ALLOWED, the imports are gone: {stale}"


def _fake_package(tmp_path: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    root = tmp_path / "kgeval"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_detects_a_deferred_upward_import(tmp_path):
    root = _fake_package(tmp_path, {
        "__init__.py": "",
        "triples.py": "import numpy\n\ndef f():\n    from .workflow.runs import load_run\n",
        "workflow/__init__.py": "",
        "workflow/runs.py": "from ..triples import f\n",
    })
    found = violations(all_imports(root), allowed=set())
    assert len(found) == 1
    assert "kgeval/triples.py:4: deferred import of kgeval.workflow.runs" in found[0]
    assert "triples (L0) imports workflow (L5)" in found[0]


def test_detects_peers_and_cycles(tmp_path):
    root = _fake_package(tmp_path, {
        "__init__.py": "",
        "evaluation/__init__.py": "from kgeval.models import base\n",
        "models/__init__.py": "",
        "models/base.py": "def g():\n    from .. import evaluation\n",
    })
    edges = all_imports(root)
    found = violations(edges, allowed=set())
    assert len(found) == 2 and all("must not import" in line for line in found)
    assert unit_cycles(edges, allowed=set()) == [["evaluation", "models"]]
    assert unit_cycles(edges, allowed=set(), key=str) == [["kgeval.evaluation", "kgeval.models.base"]]
    assert any("kgeval/models/base.py:2: deferred import of kgeval.evaluation" in line
               for line in cycle_edges(edges, ["evaluation", "models"], allowed=set()))


@pytest.mark.parametrize("text, target", [
    ("from . import metrics\n", "kgeval.metrics"),
    ("from .metrics.base import Metric\n", "kgeval.metrics.base"),
    ("import kgeval.metrics.base as b\n", "kgeval.metrics.base"),
    ("from .. import x\n", None),  # resolved above the package: not kgeval
])
def test_resolves_relative_imports(tmp_path, text, target):
    root = _fake_package(tmp_path, {"__init__.py": "", "ranks.py": text, "metrics/__init__.py": "",
                                    "metrics/base.py": ""})
    edges = [e for e in all_imports(root) if e.source == "kgeval.ranks"]
    assert [e.target for e in edges] == ([target] if target else [])


def test_a_moved_name_says_where_it_went():
    """``kgeval.models.from_pykeen`` moved to ``kgeval.interop`` (models import nothing from interop)."""
    import kgeval.interop
    import kgeval.models

    with pytest.raises(ImportError, match=r"kgeval\.models\.from_pykeen moved to kgeval\.interop\.from_pykeen"):
        from kgeval.models import from_pykeen  # noqa: F401
    assert not hasattr(kgeval.models, "not_a_name")
    assert callable(kgeval.interop.from_pykeen)
