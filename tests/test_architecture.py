"""The house's floors (docs/architecture.md, "The packages"): each package of ``tiering_core``
imports only its own floor and those below, type-only and function-local imports included, so no
two packages import each other; the reporting layer and the engine never import the command
line, and no entry point but the command does; the drivers in ``runs/`` import one another only
where the page lists it; and no module or function grows past what a reader takes in at once."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "tiering_core"
#: From the ground up; the packages of one floor import neither each other's floor above.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("errors", "humanize"),
    ("kafka",),
    ("storage",),
    ("config", "events"),
    ("metadata",),
    ("engine",),
    ("live",),
    ("context",),
    ("metrics",),
    ("tier",),
    ("monitoring",),
    ("runs",),
    ("read",),
    ("export",),
    ("replay",),
    ("report",),
    ("cli",),
)
FLOOR = {package: level for level, floor in enumerate(FLOORS) for package in floor}
#: The modules of ``runs/`` that make one driver: a driver's parts import each other freely.
DRIVERS = {
    "copy": "copy",
    "copy_plan": "copy",
    "copy_lease": "copy",
    "segment_copy": "copy",
    "copy_many": "copy",
    "copy_report": "copy",
    "erase": "erase",
    "erase_keys": "erase",
    "erase_local": "erase",
    "erase_report": "erase",
    "removal": "removal",
    "removal_evidence": "removal",
    "removal_targets": "removal",
}
#: The code held to the length rule (docs/architecture.md, "The packages").
SHORT_CODE = ("tiering_core", "spark_apps", "plugins", "dags")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 100
#: The numba kernels, each one loop kept whole so the compiler sees it whole: parsing a span of
#: records, and the Avro program's interpreter (its opcodes share position, stack and counters; a
#: call per opcode or payload costs more than the decode, ``export/avro_kernel.py``).
LONG_FUNCTIONS = {
    ("tiering_core/kafka/arrow/kernels.py", "_parse_span"),
    ("tiering_core/export/avro_kernel.py", "decode_rows"),
}
#: What the package shares rather than a driver: its errors.
SHARED_IN_RUNS = {"errors"}
#: One driver importing another (docs/architecture.md, "Drivers and executors").
DRIVER_TO_DRIVER = {
    ("erase", "rewrite"),
    ("lanes", "copy_many"),
    ("lanes", "copy_plan"),
    ("lanes", "copy_report"),
    ("lanes", "retention"),
    ("removal", "orphans"),
    ("rewrite", "rebuild"),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> Iterator[str]:
    """Every module (or name) an import statement of ``path`` names, wherever it stands."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def package_of(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] != "tiering_core" or len(parts) < 2 or parts[1] not in FLOOR:
        return None
    return parts[1]


def library_modules() -> list[Path]:
    return sorted(LIBRARY.rglob("*.py"))


def package_imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in library_modules():
        own = package_of(module_name(path))
        if own is None:
            continue
        found.setdefault(own, set()).update(p for p in map(package_of, imported(path)) if p not in (None, own))
    return found


def test_every_package_has_a_floor() -> None:
    packages = {p.stem if p.is_file() else p.name for p in LIBRARY.iterdir() if not p.name.startswith(("_", "."))}
    packages = {p for p in packages if (LIBRARY / p).is_dir() or (LIBRARY / f"{p}.py").is_file()}
    assert packages - {"py"} == set(FLOOR)


def test_no_package_imports_a_floor_above_its_own() -> None:
    upward = [
        f"{module_name(path)} imports {name}"
        for path in library_modules()
        if (own := package_of(module_name(path))) is not None
        for name in imported(path)
        if (other := package_of(name)) is not None and FLOOR[other] > FLOOR[own]
    ]
    assert upward == []


def test_no_two_packages_import_each_other() -> None:
    imports = package_imports()
    mutual = sorted((a, b) for a, bs in imports.items() for b in bs if a < b and a in imports.get(b, set()))
    assert mutual == []


def test_the_reporting_layer_and_the_engine_never_import_the_command_line() -> None:
    imports = package_imports()
    assert "cli" not in imports["report"] | imports["engine"]
    assert imports["engine"].isdisjoint({"runs", "read", "export", "replay", "report", "context", "tier"})


def test_the_spark_apps_the_plugin_and_the_dags_print_through_the_reporting_layer() -> None:
    entry_points = [p for d in ("spark_apps", "plugins", "dags") for p in sorted((ROOT / d).rglob("*.py"))]
    into_cli = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in entry_points
        for name in imported(path)
        if name == "tiering_core.cli" or name.startswith("tiering_core.cli.")
    ]
    assert into_cli == []


def test_drivers_import_one_another_only_where_the_architecture_lists_it() -> None:
    def driver(name: str) -> str | None:
        parts = name.split(".")
        if parts[:2] != ["tiering_core", "runs"] or len(parts) < 3 or parts[2] in SHARED_IN_RUNS:
            return None
        return DRIVERS.get(parts[2], parts[2])

    found = set()
    for path in sorted((LIBRARY / "runs").rglob("*.py")):
        own = driver(module_name(path))
        for name in imported(path):
            other = driver(name)
            if own is not None and other is not None and other != own:
                found.add((own, name.split(".")[2]))
    assert found == DRIVER_TO_DRIVER


def test_no_module_over_500_lines_and_no_function_over_100() -> None:
    too_long = []
    for path in sorted(p for d in SHORT_CODE for p in (ROOT / d).rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        text = path.read_text()
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
            too_long.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or (name, node.name) in LONG_FUNCTIONS:
                continue
            if (lines := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_FUNCTION_LINES:
                too_long.append(f"{name}:{node.lineno}: {node.name}, {lines} lines")
    assert too_long == []


#: The least share of the library's modules with logic that have their own test file.
MIN_MIRRORED = 0.85


def test_most_modules_have_their_own_test_file() -> None:
    """Tests mirror the source: ``tiering_core/<package>/<module>.py`` is tested in
    ``tests/<package>/test_<module>.py``. Counted over the modules that define a function (the
    migration scripts aside: ``tests/metadata/test_migrations.py`` runs them all, in order)."""
    with_logic, mirrored = [], []
    for path in sorted(LIBRARY.rglob("*.py")):
        relative = path.relative_to(LIBRARY)
        if path.name == "__init__.py" or "migrations" in relative.parts:
            continue
        tree = ast.parse(path.read_text())
        if not any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) for node in ast.walk(tree)):
            continue
        with_logic.append(relative.as_posix())
        if (ROOT / "tests" / relative.parent / f"test_{path.name}").exists():
            mirrored.append(relative.as_posix())
    missing = sorted(set(with_logic) - set(mirrored))
    assert len(mirrored) / len(with_logic) >= MIN_MIRRORED, f"{len(mirrored)} of {len(with_logic)}; none: {missing}"
