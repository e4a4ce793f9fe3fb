"""The package's layers as docs/architecture.md draws them: read from its table, checked against the imports.

An import that goes up a layer, a cycle between two packages (function-level imports included; only
``if TYPE_CHECKING:`` blocks, which never run, are left out), or a top-level module the table does not list
fails here. The documented entry points, and every ``from structnmt... import`` line of the docs' Python
blocks, must import.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "structnmt"
DOC = ROOT / "docs" / "architecture.md"


def layer_table() -> dict[str, int]:
    """docs/architecture.md's table: top-level package or module name -> rank."""
    ranks = {}
    for m in re.finditer(r"^\| (\d+) \| `([a-z_]+)(/|\.py)` \|", DOC.read_text(), flags=re.M):
        ranks[m.group(2)] = int(m.group(1))
    return ranks


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import/ImportFrom under ``tree``, skipping ``if TYPE_CHECKING:`` bodies."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from (n for child in node.orelse for n in _imports_of(child))
            continue
        yield from _imports_of(node)


def _imports_of(node: ast.AST):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _imports(node)


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    is_pkg = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_pkg else parts), is_pkg


def _targets(module: str, is_pkg: bool, node: ast.AST) -> list[str]:
    """The structnmt modules an import statement names (absolute dotted names)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "structnmt"]
    if node.level == 0:
        return [node.module] if (node.module or "").split(".")[0] == "structnmt" else []
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    target = ".".join(base + ([node.module] if node.module else []))
    if node.module is None:  # from . import x, y: each a module of that package (or a name in its __init__)
        return [f"{target}.{a.name}" for a in node.names]
    return [target]


def _top(name: str) -> str:
    """The top-level unit of a dotted structnmt name: its package, or its module (``config``)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "structnmt"


def package_edges() -> dict[tuple[str, str], str]:
    """(importing unit, imported unit) -> one file:line where it happens, for every edge between units."""
    edges = {}
    for path in sorted(PKG.rglob("*.py")):
        module, is_pkg = _module_name(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in _imports(tree):
            for target in _targets(module, is_pkg, node):
                a, b = _top(module), _top(target)
                if a != b and b != "structnmt":
                    edges.setdefault((a, b), f"{path.relative_to(ROOT)}:{node.lineno}")
    return edges


def test_the_table_lists_every_top_level_unit_and_nothing_else():
    ranks = layer_table()
    assert len(ranks) >= 15, ranks  # the table was read (a change of its format must not empty this test)
    units = {p.stem for p in PKG.glob("*.py") if p.name != "__init__.py"}
    units |= {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    units.discard("recipes")  # data (the recipe YAMLs), not code
    assert units == set(ranks), f"not in docs/architecture.md: {units - set(ranks)}; listed but absent: " \
                                f"{set(ranks) - units}"


def upward(edges: dict[tuple[str, str], str], ranks: dict[str, int]) -> list[str]:
    """The edges that import from a higher layer."""
    return [f"{where}: {a} (rank {ranks[a]}) imports {b} (rank {ranks[b]})"
            for (a, b), where in edges.items() if ranks[b] > ranks[a]]


def cycles(edges: dict[tuple[str, str], str]) -> list[str]:
    """The edges a -> b from which a can be reached again."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            n = todo.pop()
            if n == goal:
                return True
            if n not in seen:
                seen.add(n)
                todo.extend(graph.get(n, ()))
        return False

    return [f"{a} -> {b} ({where}) and back" for (a, b), where in edges.items() if reaches(b, a)]


def test_no_import_goes_up_a_layer():
    problems = upward(package_edges(), layer_table())
    assert not problems, "\n".join(problems)


def test_no_two_packages_import_each_other_even_through_function_level_imports():
    problems = cycles(package_edges())
    assert not problems, "\n".join(problems)


def test_the_checks_fail_on_a_cycle_an_upward_import_and_see_function_level_imports():
    edges = {("data", "syntax"): "a.py:1", ("syntax", "fileio"): "b.py:2", ("fileio", "data"): "c.py:3"}
    assert len(cycles(edges)) == 3
    assert cycles({("data", "syntax"): "a.py:1"}) == []
    assert upward({("fileio", "data"): "c.py:3"}, {"fileio": 1, "data": 5}) == [
        "c.py:3: fileio (rank 1) imports data (rank 5)"]
    tree = ast.parse("from ..cli import main\nif TYPE_CHECKING:\n    from ..decode import x\n"
                     "def f():\n    from ..train import y\n")
    found = [t for n in _imports(tree) for t in _targets("structnmt.nn.mod", False, n)]
    assert found == ["structnmt.cli", "structnmt.train"]  # the TYPE_CHECKING import alone is left out


ENTRY_POINTS = re.compile(r"`(structnmt(?:\.[a-z_]+)+)`")


def test_every_documented_entry_point_imports():
    names = ENTRY_POINTS.findall(DOC.read_text())
    assert len(names) >= 15
    for name in names:
        try:
            importlib.import_module(name)
            continue
        except ModuleNotFoundError:
            module, _, attr = name.rpartition(".")
        assert hasattr(importlib.import_module(module), attr), f"docs/architecture.md names {name}: not found"


def documented_imports() -> list[str]:
    """Every ``from structnmt... import ...`` / ``import structnmt...`` line in the README's and docs' Python
    blocks and inline code (the public names a user or plugin author is told to import)."""
    lines = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for m in re.finditer(r"^\s*(from structnmt[\w.]* import [\w, ]+|import structnmt[\w.]*)\s*$",
                             page.read_text(), flags=re.M):
            lines.add(m.group(1).strip().rstrip(","))
    return sorted(lines)


def test_every_documented_import_works():
    imports = documented_imports()
    assert any("structnmt.testing" in line for line in imports), imports  # the docs were read
    script = "\n".join(imports)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, f"{proc.stderr}\nin:\n{script}"


@pytest.mark.parametrize("name", ["structnmt.testing.check_mechanism", "structnmt.plugins.load_plugins",
                                  "structnmt.config.load_config", "structnmt.cli.main"])
def test_the_public_names_stay_where_the_docs_put_them(name):
    module, _, attr = name.rpartition(".")
    assert callable(getattr(importlib.import_module(module), attr))


def test_prepare_and_parse_load_without_torch():
    """`structnmt prepare` and `parse` start without torch (1.7 s): the three places that import it lazily for them
    (marked `# noqa: PLC0415` in fileio/files.py, syntax/features.py and data/prepare.py) keep it so."""
    script = ("import sys\nimport structnmt.data.prepare, structnmt.syntax.parse_cache, structnmt.fileio.files\n"
              "print(sorted(m for m in ('torch', 'structnmt.machine.device') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
