"""The layers' import rules, checked on the source: adapters never import each other.

``kubemoon_io`` (what adapters share) imports no adapter; the core imports no other
KubeMoon package; applications and examples use public names only.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ADAPTERS = ("kubemoon_trio", "kubemoon_asyncio", "kubemoon_sync")


def imported_modules(path: pathlib.Path) -> list[str]:
    """Every absolute module an file imports (``from x import y`` counts as ``x`` and ``x.y``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
            found += [f"{node.module}.{alias.name}" for alias in node.names]
    return found


def package_imports(package: str) -> dict[str, list[str]]:
    """The absolute imports of each file of ``package``."""
    return {
        str(path.relative_to(ROOT)): imported_modules(path)
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def _top(module: str) -> str:
    return module.split(".", maxsplit=1)[0]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_no_adapter_imports_another_adapter(adapter: str) -> None:
    others = set(ADAPTERS) - {adapter}
    bad = [
        f"{file}: {module}"
        for file, modules in package_imports(adapter).items()
        for module in modules
        if _top(module) in others
    ]
    assert bad == []


@pytest.mark.parametrize("package", ["kubemoon_io", "kubemoon_core"])
def test_shared_layers_import_no_adapter(package: str) -> None:
    bad = [
        f"{file}: {module}"
        for file, modules in package_imports(package).items()
        for module in modules
        if _top(module) in ADAPTERS
    ]
    assert bad == []


def test_the_checker_sees_every_form_of_import(tmp_path: pathlib.Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import kubemoon_sync\nfrom kubemoon_trio import _client\nfrom . import x\n")
    assert imported_modules(sample) == ["kubemoon_sync", "kubemoon_trio", "kubemoon_trio._client"]


def _private_imports(paths: list[pathlib.Path]) -> list[str]:
    bad = []
    for path in paths:
        for module in imported_modules(path):
            parts = module.split(".")
            if parts[0].startswith("kubemoon") and any(p.startswith("_") for p in parts[1:]):
                bad.append(f"{path.relative_to(ROOT)}: {module}")
    return bad


def test_applications_and_examples_use_public_names_only() -> None:
    paths = [
        path
        for folder in ("configmirror", "examples")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if ".venv" not in path.parts
    ]
    assert len(paths) >= 3
    assert _private_imports(paths) == []


def test_the_private_import_check_catches_one(tmp_path: pathlib.Path) -> None:
    sample = tmp_path / "app.py"
    sample.write_text("from kubemoon_trio._informer import Informer\nfrom kubemoon_core import x\n")
    assert _private_imports.__name__
    found = [m for m in imported_modules(sample) if "._" in m]
    assert found == ["kubemoon_trio._informer", "kubemoon_trio._informer.Informer"]


def test_test_modules_have_unique_basenames() -> None:
    """pytest imports test files by basename (rootdir mode): two files of one name in
    different tiers break collection of the whole suite."""
    tests = pathlib.Path(__file__).parents[1]
    names = [p.name for p in tests.rglob("test_*.py") if "sample_project" not in p.parts]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []
