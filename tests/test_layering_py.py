"""The Python layering rules (docs/architecture.md, "Layers"): every import inside python/qtts,
read with ast, goes from a module to one in a room of the same or a lower layer of the table in
docs/architecture.md ("Python layers") and, inside its room, to one of the same or a lower floor;
no two rooms import each other, and the import graph has no circle, counting imports deferred
into functions and, separately, those under `if TYPE_CHECKING:`."""
from __future__ import annotations

import ast
import fnmatch
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "qtts"
ARCHITECTURE = ROOT / "docs" / "architecture.md"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted ("qtts.runtime.model.model")
    target: str  # the imported module inside qtts
    type_checking: bool  # under `if TYPE_CHECKING:` (never executed)
    line: int


def module_names() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, not "__init__")."""
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(nodes: Iterable[ast.AST], type_checking: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """(import node, whether under `if TYPE_CHECKING:`) of every import among `nodes`, at any depth."""
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, type_checking
        elif isinstance(node, ast.If) and _is_type_checking(node):
            yield from _walk(node.body, True)
            yield from _walk(node.orelse, type_checking)  # the else branch runs
        else:
            yield from _walk(ast.iter_child_nodes(node), type_checking)


def imports(modules: dict[str, Path]) -> list[Import]:
    """Every import from one qtts module of another. `from pkg import name` counts as an import of
    the submodule pkg.name when there is one, else of pkg itself."""
    found = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, tc in _walk([tree]):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = name.split(".")
                    base = base[:len(base) - node.level + (1 if is_package else 0)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                targets = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules else prefix for a in node.names]
            for target in targets:
                while target and target not in modules:  # `import qtts.x.y` of a name inside a module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    found.append(Import(name, target, tc, node.lineno))
    return found


def circles(edges: list[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


@dataclass(frozen=True)
class Room:
    """One row of the "Python layers" table: a room at a layer, its modules floor by floor."""
    layer: int
    name: str
    floors: tuple[tuple[str, ...], ...]  # module patterns, dotted and whole, from the ground floor up


def layer_table() -> list[Room]:
    """The rooms of the "Python layers" table in docs/architecture.md. A room named by a package
    (`qtts.runtime.engine`) holds that package and the modules its floors name inside it; another
    room's floors name modules whole."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("### Python layers", 1)[1].split("\n#", 1)[0]
    rooms = []
    for line in section.splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|([^|]*)\|([^|]*)\|", line)
        if not m:
            continue
        package = re.findall(r"`([^`]+)`", m.group(2))
        floors = [re.findall(r"`([^`]+)`", floor) for floor in m.group(3).split(";")]
        if package:
            floors = [[f"{package[0]}.{name}" for name in floor] for floor in floors]
            floors[0].insert(0, package[0])
        rooms.append(Room(int(m.group(1)), package[0] if package else m.group(2).strip(),
                          tuple(tuple(floor) for floor in floors)))
    return rooms


def place(module: str, table: list[Room]) -> tuple[Room, int] | None:
    """The room and floor of the most specific pattern that names the module (an exact name before a glob)."""
    best: tuple[int, Room, int] | None = None  # (specificity, room, floor)
    for room in table:
        for floor, patterns in enumerate(room.floors):
            for pattern in patterns:
                if fnmatch.fnmatchcase(module, pattern):
                    rank = (1 << 16) if pattern == module else len(pattern)
                    if best is None or rank > best[0]:
                        best = (rank, room, floor)
    return None if best is None else best[1:]


def test_every_module_has_a_room() -> None:
    table = layer_table()
    assert table, "docs/architecture.md has no 'Python layers' table"
    missing = [m for m in module_names() if place(m, table) is None]
    assert not missing, f"modules the layer table of docs/architecture.md does not place: {missing}"


def test_imports_go_down_the_layers() -> None:
    # between rooms by the rooms' layers; inside a room by its floors
    table = layer_table()
    modules = module_names()
    wrong = []
    for imp in imports(modules):
        src, dst = place(imp.source, table), place(imp.target, table)
        if src is None or dst is None:
            continue
        (src_room, src_floor), (dst_room, dst_floor) = src, dst
        if dst_room.layer > src_room.layer:
            wrong.append(f"{imp.source} (room {src_room.name}, layer {src_room.layer}) imports {imp.target} "
                         f"(room {dst_room.name}, layer {dst_room.layer}), line {imp.line}")
        elif dst_room == src_room and dst_floor > src_floor:
            wrong.append(f"{imp.source} (floor {src_floor} of {src_room.name}) imports {imp.target} "
                         f"(floor {dst_floor}), line {imp.line}")
    assert not wrong, "imports against the layers of docs/architecture.md:\n" + "\n".join(wrong)


def test_no_room_circle() -> None:
    # two rooms of one layer may not import each other either
    table = layer_table()
    edges = []
    for imp in imports(module_names()):
        src, dst = place(imp.source, table), place(imp.target, table)
        if src is not None and dst is not None and src[0] != dst[0]:
            edges.append((src[0].name, dst[0].name))
    assert not circles(edges), f"rooms that import each other: {circles(edges)}"


def test_no_import_circle() -> None:
    found = imports(module_names())
    run_time = circles([(i.source, i.target) for i in found if not i.type_checking])
    assert not run_time, f"import circles: {run_time}"
    with_annotations = circles([(i.source, i.target) for i in found])
    assert not with_annotations, f"import circles through TYPE_CHECKING imports: {with_annotations}"


def test_the_reader_sees_circles() -> None:
    # the checker itself: a circle through a deferred import and one through TYPE_CHECKING
    assert circles([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]) == [["a", "b", "c"]]
    assert circles([("a", "b")]) == []
