"""The package layout follows the data flow: each package imports only the ones below it, and
nothing but the command line imports the command line."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "cudalock"

#: Shared building blocks every package may use.
BASE = frozenset(
    {
        "errors",
        "versions",
        "model",
        "platforms",
        "urls",
        "fsutil",
        "procs",
        "shipped",
        "httpget",
        "tomlfile",
        "safetext",
        "request",
        "defaults",
        "units",
        "sharedlibs",
        "wheelzip",
        "wheelbuild",
        "packagenames",
    }
)
#: What each package may import besides the base (and itself); "cli" may import anything.
ALLOWED: dict[str, frozenset[str]] = {
    "matrix": frozenset(),
    "machine": frozenset({"matrix"}),
    "resolve": frozenset({"matrix"}),
    "memory": frozenset(),
    "lock": frozenset({"matrix", "resolve"}),
    "audit": frozenset({"matrix", "machine", "resolve"}),
    "envfiles": frozenset({"matrix", "machine", "resolve", "lock", "audit"}),
    "doctor": frozenset({"matrix", "machine", "resolve", "audit", "memory"}),
}


def imported_packages(path: Path) -> set[str]:
    """The top-level parts of cudalock (``cudalock.X...`` → X) that ``path`` imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "cudalock" and len(parts) > 1:
                found.add(parts[1])
    return found


def package_of(path: Path) -> str:
    relative = path.relative_to(SRC)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def test_nothing_but_the_command_line_imports_it() -> None:
    offenders = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if package_of(path) not in ("cli", "__main__") and "cli" in imported_packages(path)
    ]
    assert offenders == []


def test_each_package_imports_only_those_below_it() -> None:
    problems = []
    for path in sorted(SRC.rglob("*.py")):
        package = package_of(path)
        if package in ("cli", "__main__", "__init__"):
            continue
        allowed = BASE | ALLOWED.get(package, frozenset()) | {package}
        for imported in sorted(imported_packages(path) - allowed):
            problems.append(f"{path.relative_to(SRC)} imports cudalock.{imported}")
    assert problems == []


def test_every_module_belongs_to_a_known_package_or_the_base() -> None:
    unknown = (
        {package_of(path) for path in SRC.rglob("*.py")}
        - BASE
        - set(ALLOWED)
        - {"cli", "__main__", "__init__"}
    )
    assert unknown == set()


def test_no_package_exports_a_name_its_submodules_use() -> None:
    # Importing cudalock.X.Y sets attribute Y on package X, so an exported function named Y
    # would be replaced by the module as soon as anything imported that module.
    clashes: dict[str, set[str]] = {}
    for init in SRC.rglob("__init__.py"):
        package = init.parent
        submodules = {path.stem for path in package.glob("*.py")} | {
            path.name for path in package.iterdir() if (path / "__init__.py").is_file()
        }
        exported: set[str] = set()
        for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
            ):
                exported |= {
                    element.value
                    for element in ast.walk(node.value)
                    if isinstance(element, ast.Constant) and isinstance(element.value, str)
                }
        if exported & submodules:
            clashes[str(package.relative_to(SRC))] = exported & submodules
    assert clashes == {}


#: Core modules whose public names are not declared yet (each is to get its ``__all__``).
UNDECLARED = frozenset(
    {
        "machine/host.py",
        "machine/overrides.py",
        "machine/probe.py",
        "matrix/check.py",
        "matrix/load.py",
        "matrix/model.py",
        "model.py",
        "versions.py",
    }
)


def declares_all(path: Path) -> bool:
    return any(
        isinstance(node, (ast.Assign, ast.AnnAssign))
        and any(
            isinstance(target, ast.Name) and target.id == "__all__"
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
        for node in ast.parse(path.read_text(encoding="utf-8")).body
    )


def test_every_core_module_declares_its_public_names() -> None:
    # The command modules are entry points (cli.main calls their add_arguments and run); a
    # package's __init__ declares what it re-exports only when it re-exports anything.
    undeclared = {
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if package_of(path) not in ("cli", "__main__", "__init__")
        and path.name != "__init__.py"
        and not declares_all(path)
    }
    assert undeclared <= UNDECLARED
