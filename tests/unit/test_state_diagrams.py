"""The docs' state diagrams (docs/diagrams/*.mmd) are the machines' tables, drawn.

``scripts/state_diagrams.py --check`` runs in ``make lint``; this runs the same check in the
unit tier, and shows it fails when a table and its diagram disagree.
"""

from __future__ import annotations

import importlib.util
import pathlib
from types import ModuleType

import pytest

from kubemoon_core.lowlevel import Discovery
from kubemoon_core.sharding import ShardMember

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "state_diagrams", ROOT / "scripts" / "state_diagrams.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_diagram_is_its_table(script: ModuleType) -> None:
    assert script.stale() == []
    assert script.main(["--check"]) == 0
    drawn = (ROOT / "docs" / "diagrams" / "discovery.mmd").read_text(encoding="utf-8")
    assert drawn.endswith(Discovery.transitions().diagram())


def test_a_diagram_that_disagrees_with_its_table_is_named(
    script: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(script.TABLES, "discovery", ShardMember.transitions)
    monkeypatch.setitem(script.TABLES, "extra", Discovery.transitions)
    monkeypatch.delitem(script.TABLES, "leader")
    assert script.stale() == [
        "discovery.mmd: differs from its table",
        "extra.mmd: missing",
        "leader.mmd: no table draws it",
    ]
    assert script.main(["--check"]) == 1
    assert "docs/diagrams/discovery.mmd: differs" in capsys.readouterr().err


def test_every_documented_diagram_is_included_in_the_docs() -> None:
    docs = "".join(path.read_text(encoding="utf-8") for path in (ROOT / "docs").glob("*.rst"))
    for path in (ROOT / "docs" / "diagrams").glob("*.mmd"):
        assert f"diagrams/{path.name}" in docs, f"{path.name} is in no page"
