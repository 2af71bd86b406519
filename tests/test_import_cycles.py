"""The pipeline reads one way (sources -> observations -> picture -> wait graph -> detectors ->
verdict -> renderers), so no module of hangscope may import, even lazily or for typing only,
a module that imports it back. A cycle is how layers start to blur; this finds every one."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent


def _module_names(package_dir: Path) -> dict[str, Path]:
    names = {}
    for path in package_dir.rglob("*.py"):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _imported(module: str, is_package: bool, node: ast.AST, known: dict[str, Path]) -> list[str]:
    """The hangscope modules one import statement loads (``from pkg import submodule`` loads the
    submodule; ``from pkg import name`` loads pkg)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in known]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[:len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    found = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        if sub in known:
            found.append(sub)
        elif base in known:
            found.append(base)
    return found


def import_graph(package_dir: Path) -> nx.DiGraph:
    known = _module_names(package_dir)
    graph = nx.DiGraph()
    for module, path in known.items():
        graph.add_node(module)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            for target in _imported(module, path.name == "__init__.py", node, known):
                if target != module:
                    graph.add_edge(module, target)
    return graph


def import_cycles(package_dir: Path) -> list[list[str]]:
    graph = import_graph(package_dir)
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def test_hangscope_has_no_import_cycles() -> None:
    assert import_graph(ROOT / "hangscope").has_edge("hangscope.pipeline", "hangscope.result")
    cycles = import_cycles(ROOT / "hangscope")
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_check_finds_lazy_typing_and_relative_cycles(tmp_path: Path) -> None:
    # GIVEN a package whose modules import each other lazily, for typing, and relatively
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub import leaf\n")
    (pkg / "sub" / "leaf.py").write_text("import os\nfrom pkg.sub import other\n")
    (pkg / "sub" / "other.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg import b\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import X\n")
    (pkg / "c.py").write_text("from . import a\nfrom .sub import leaf\n")
    # WHEN the cycles are looked for, THEN a -> b -> c -> a is the one found: a package that
    # imports its own submodule is not a cycle
    assert import_cycles(pkg) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert import_graph(pkg).has_edge("pkg.c", "pkg.sub.leaf")
