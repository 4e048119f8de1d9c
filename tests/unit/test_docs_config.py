"""The docs build resolves every cross-reference: nitpicky on, nothing suppressed or ignored.

``make docs`` runs Sphinx with ``-W``, so a reference that does not resolve fails the build;
this test keeps the configuration from hiding one.
"""

import ast
from pathlib import Path

CONF = Path(__file__).parents[2] / "docs" / "conf.py"


def _assignments() -> dict[str, ast.expr]:
    tree = ast.parse(CONF.read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and node.value is not None:
                    found[target.id] = node.value
    return found


def test_nitpicky_is_on_and_nothing_is_suppressed() -> None:
    settings = _assignments()
    nitpicky = settings["nitpicky"]
    assert isinstance(nitpicky, ast.Constant) and nitpicky.value is True
    for name in ("suppress_warnings", "nitpick_ignore", "nitpick_ignore_regex"):
        value = settings.get(name)
        assert value is None or (isinstance(value, ast.List) and not value.elts), name


def test_every_test_file_the_docs_name_exists() -> None:
    import re

    root = CONF.parents[1]
    named = set()
    for page in (root / "docs").glob("*.rst"):
        named |= set(re.findall(r"``(tests/[\w/]+\.py)", page.read_text(encoding="utf-8")))
    assert len(named) > 20
    # docs/testing.rst's user project is written into a temporary directory by
    # tests/integration/test_user_project.py; its test file is not one of ours.
    named.discard("tests/test_backup.py")
    missing = sorted(path for path in named if not (root / path).is_file())
    assert missing == []
