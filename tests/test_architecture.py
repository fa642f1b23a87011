"""docs/architecture.md stays true: the modules it names exist and the imports follow its arrows."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = (REPO / "docs" / "architecture.md").read_text()
FOLDERS = {
    "core": REPO / "sit_keras",
    "agents": REPO / "agents",
    "export": REPO / "export",
    "commands": REPO / "commands",
}


def _package(module: str) -> str | None:
    """The package (core, agents, export, commands) of an imported module name; None outside sit_keras."""
    if module == "sit_keras" or module.startswith("sit_keras."):
        for name in ("agents", "export", "commands"):
            if module == f"sit_keras.{name}" or module.startswith(f"sit_keras.{name}."):
                return name
        return "core"
    return None


def _imports(path: Path) -> set[str]:
    """Every absolute module a file imports, at module level or inside functions."""
    return _imported(ast.parse(path.read_text()))


def _imported(tree: ast.AST) -> set[str]:
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def _import_table() -> dict[tuple[str, str], set[str]]:
    """``{(package, file relative to the repo): imported sit_keras modules of another package}``."""
    table = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            crossing = {m for m in _imports(path) if _package(m) not in (None, package, "core")}
            if crossing:
                table[package, path.relative_to(REPO).as_posix()] = crossing
    return table


def test_every_path_on_the_page_exists():
    paths = {p for p in re.findall(r"`([\w./-]+)`", PAGE) if "/" in p}
    assert len(paths) >= 25
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_core_imports_no_other_package():
    table = _import_table()
    assert not [f for (package, f) in table if package == "core"]


def test_training_imports_neither_export_nor_the_commands():
    assert not [f for (package, f) in _import_table() if package == "agents"]


def test_only_the_commands_import_both_sides():
    both = {
        f for (package, f), modules in _import_table().items()
        if {_package(m) for m in modules} >= {"agents", "export"}
    }  # fmt: skip
    assert both and all(f.startswith("commands/") for f in both), both


def test_export_reads_only_the_policy_description_and_the_environments():
    allowed = ("sit_keras.agents.networks.policy_network", "sit_keras.agents.environments")
    for (package, f), modules in _import_table().items():
        if package == "export":
            wrong = sorted(
                m for m in modules if not m.startswith(allowed) and m != "sit_keras.agents.networks"
            )  # the commands included: export never imports them
            assert not wrong, f"{f} imports {wrong}"


def test_agents_keeps_few_modules_at_its_top_level():
    modules = sorted(p.name for p in FOLDERS["agents"].glob("*.py"))
    folders = sorted(p.name for p in FOLDERS["agents"].iterdir() if (p / "__init__.py").exists())
    assert len(modules) <= 8, modules
    assert folders == ["algorithms", "environments", "networks", "training"]
    for folder in folders:
        assert f"`agents/{folder}/`" in PAGE


def _runtime_imports(path: Path) -> set[str]:
    """``_imports`` without those under ``if TYPE_CHECKING:`` (annotations only, never executed)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            node.body = []
    return _imported(tree)


def test_the_harness_parts_do_not_import_the_harness():
    """``agents/training/``'s other modules are the harness's parts: importing it back would be a cycle."""
    harness = "sit_keras.agents.training.harness"
    folder = REPO / "agents" / "training"
    parts = [p for p in folder.glob("*.py") if p.name not in ("harness.py", "__init__.py")]
    assert {"run_settings.py", "algorithm.py", "stops.py", "keyword_messages.py", "evaluation.py"} <= {
        p.name for p in parts
    }
    wrong = sorted(
        p.name for p in parts if any(m == harness or m.startswith(harness + ".") for m in _runtime_imports(p))
    )
    assert not wrong, f"import the harness: {wrong}"
