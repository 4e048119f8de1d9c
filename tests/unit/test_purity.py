"""kubemoon_core must stay sans-IO: no module may import I/O, clocks, concurrency or gc."""

import ast
import pathlib

import kubemoon_core

FORBIDDEN = {
    "socket", "ssl", "select", "selectors", "asyncio", "trio", "anyio", "threading",
    "subprocess", "time", "httpcore", "h11", "httpx", "requests", "urllib3", "gc",
    "urllib.request", "http.client", "concurrent", "multiprocessing", "os", "io",
}  # fmt: skip

CORE = pathlib.Path(kubemoon_core.__file__).parent


def _imports(path: pathlib.Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def _forbidden(module: str) -> bool:
    parts = module.split(".")
    return any(".".join(parts[:i]) in FORBIDDEN for i in range(1, len(parts) + 1))


def test_core_imports_nothing_that_does_io() -> None:
    files = sorted(CORE.rglob("*.py"))
    assert len(files) >= 5
    bad = [
        f"{path.name}:{line}: {module}"
        for path in files
        for line, module in _imports(path)
        if _forbidden(module)
    ]
    assert bad == []


def test_the_checker_catches_a_forbidden_import(tmp_path: pathlib.Path) -> None:
    sample = tmp_path / "bad.py"
    sample.write_text("import os\nfrom time import monotonic\nimport urllib.request\n")
    assert [m for _, m in _imports(sample) if _forbidden(m)] == [
        "os",
        "time",
        "urllib.request",
    ]
