"""mypy --strict checks a typed controller: the Widget example passes, and a copy with
deliberate mistakes is reported at each one (the context is ``ReconcileContext[Widget]``)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "widgets"

# (the example's text, the mistake put in its place, what mypy says about it)
MISTAKES = [
    (
        "range(widget.spec.replicas)",
        "range(widget.spec.replica)",
        r'"WidgetSpec" has no attribute "replica"',
    ),
    (
        'ConfigMap(metadata={"name": name}, data=data)',
        'ConfigMap(metadata={"name": name}, data=widget.spec.replicas)',
        r'Argument "data" to "ConfigMap" has incompatible type "int"',
    ),
    (
        "if child.metadata.name not in wanted:",
        'if child["metadata"]["name"] not in wanted:',
        r'Value of type "ConfigMap" is not indexable',
    ),
    # metadata is a typed ObjectMeta: its attributes have types, misspelt ones do not exist.
    (
        "observed_generation=widget.metadata.generation,",
        "observed_generation=widget.metadata.name,",
        r'Argument "observed_generation" to "WidgetStatus" has incompatible type "str \| None"',
    ),
    (
        "    data = widget.spec.data\n",
        "    data = widget.spec.data\n    print(widget.metadata.owner_reference)\n",
        r'"ObjectMeta" has no attribute "owner_reference"',
    ),
    (
        "    widget = ctx.obj\n",
        "    widget = ctx.obj\n    print(widget.spec)\n",
        r'Item "None" of "Widget \| None" has no attribute "spec"',
    ),
    (
        "await ctx.update_status(status)",
        "await ctx.update_status(3)",
        r'No overload variant|Argument 1 to "update_status" of "ReconcileContext" has incompatible type "int"',
    ),
    # ctx.condition gives typed conditions, no mappings.
    (
        "    status = WidgetStatus(\n",
        '    print(conditions[0]["reason"])\n    status = WidgetStatus(\n',
        r'Value of type "Condition" is not indexable',
    ),
    # Only kinds are owned: not a class that is no kind, nor a part of one.
    (
        'manager.controller("widgets", Widget).owns(ConfigMap).complete(reconcile)\n    return',
        'manager.controller("widgets", Widget).owns(km.Manager).complete(reconcile)\n    return',
        r'Argument 1 to "owns" of "ControllerBuilder" has incompatible type "type\[Manager\]"',
    ),
    (
        "    done = ready == len(wanted)\n",
        "    ctx.owned(WidgetStatus)\n    done = ready == len(wanted)\n",
        r'Value of type variable "K" of "owned" of "ReconcileContext" cannot be "WidgetStatus"',
    ),
]


def test_mypy_passes_the_example_and_reports_each_mistake(tmp_path: Path) -> None:
    source = (EXAMPLE / "controller.py").read_text(encoding="utf-8")
    shutil.copy(EXAMPLE / "widget_api.py", tmp_path / "widget_api.py")
    (tmp_path / "controller.py").write_text(source, encoding="utf-8")
    bad = source
    for right, wrong, _ in MISTAKES:
        assert right in bad, right
        bad = bad.replace(right, wrong, 1)
    (tmp_path / "bad_controller.py").write_text(bad, encoding="utf-8")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            str(tmp_path / "controller.py"),
            str(tmp_path / "bad_controller.py"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert result.returncode == 1, result.stdout + result.stderr
    assert not [e for e in errors if "bad_controller.py" not in e], errors
    for _, _, message in MISTAKES:
        assert any(re.search(message, e) for e in errors), (message, errors)
    assert len(errors) == len(MISTAKES), errors


PYRIGHT = Path(sys.executable).parent / "basedpyright"


def _pyright(folder: Path) -> list[str]:
    """Pyright's (basic) errors over ``folder``, with the repository importable."""
    config = {"extraPaths": [str(ROOT)], "pythonVersion": "3.11", "typeCheckingMode": "basic"}
    (folder / "pyrightconfig.json").write_text(json.dumps(config), encoding="utf-8")
    result = subprocess.run(
        [str(PYRIGHT), "--pythonpath", sys.executable, "--level", "error"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return [line for line in result.stdout.splitlines() if " - error:" in line]


def test_pyright_reports_the_mistakes_too(tmp_path: Path) -> None:
    source = (EXAMPLE / "controller.py").read_text(encoding="utf-8")
    shutil.copy(EXAMPLE / "widget_api.py", tmp_path / "widget_api.py")
    (tmp_path / "controller.py").write_text(source, encoding="utf-8")
    right, wrong, _ = MISTAKES[0]
    (tmp_path / "bad_controller.py").write_text(source.replace(right, wrong), encoding="utf-8")
    config = {"extraPaths": [str(ROOT)], "pythonVersion": "3.11"}
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(config), encoding="utf-8")
    result = subprocess.run(
        [str(PYRIGHT), "--pythonpath", sys.executable, "--level", "error"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    errors = [line for line in result.stdout.splitlines() if " - error:" in line]
    assert result.returncode == 1, result.stdout
    assert len(errors) == 1, errors
    assert "bad_controller.py" in errors[0] and '"replica"' in errors[0], errors


TEAMSPACE_MISTAKES = [
    (
        "for owner in team.spec.owners]",
        "for owner in team.spec.owner]",
        r'"TeamSpaceSpec" has no attribute "owner"',
    ),
    (
        "TeamSpaceStatus(namespace, team.metadata.generation, conditions)",
        "TeamSpaceStatus(namespace, team.metadata.generation, conditions, 3)",
        r'Too many arguments for "TeamSpaceStatus"',
    ),
    (
        "return AdmissionResponse.allow()",
        "return None",
        r"Incompatible return value type \(got \"None\", expected \"AdmissionResponse\"\)",
    ),
    # A webhook of a kind hands its handler typed objects.
    (
        "owners = request.object.spec.owners if request.object else []",
        'owners = request.object["spec"]["owners"] if request.object else []',
        r'Value of type "TeamSpace" is not indexable',
    ),
    # metadata= takes an ObjectMeta or a mapping of its JSON form, nothing else.
    (
        'await ctx.ensure(Namespace(metadata={"name": namespace}))',
        "await ctx.ensure(Namespace(metadata=namespace))",
        r'Argument "metadata" to "Namespace" has incompatible type "str"; expected "ObjectMeta \| Mapping\[str, Any\]"',
    ),
    (
        "ctx.owned(Namespace),",
        "ctx.owned(Manager),",
        r'Value of type variable "K" of "owned" of "ReconcileContext" cannot be "Manager"',
    ),
]


def test_mypy_passes_the_teamspace_example_and_reports_each_mistake(tmp_path: Path) -> None:
    source = (ROOT / "examples" / "teamspace" / "operator.py").read_text(encoding="utf-8")
    (tmp_path / "teamspace_operator.py").write_text(source, encoding="utf-8")
    bad = source
    for right, wrong, _ in TEAMSPACE_MISTAKES:
        assert right in bad, right
        bad = bad.replace(right, wrong, 1)
    (tmp_path / "bad_teamspace.py").write_text(bad, encoding="utf-8")
    result = subprocess.run(
        [
            *(sys.executable, "-m", "mypy", "--strict", "--no-error-summary"),
            *("--cache-dir", str(ROOT / ".mypy_cache")),
            str(tmp_path / "teamspace_operator.py"),
            str(tmp_path / "bad_teamspace.py"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert result.returncode == 1, result.stdout + result.stderr
    assert not [e for e in errors if "bad_teamspace.py" not in e], errors
    for _, _, message in TEAMSPACE_MISTAKES:
        assert any(re.search(message, e) for e in errors), (message, errors)
    assert len(errors) == len(TEAMSPACE_MISTAKES), errors


def test_pyright_passes_the_teamspace_example_and_reports_each_mistake(tmp_path: Path) -> None:
    source = (ROOT / "examples" / "teamspace" / "operator.py").read_text(encoding="utf-8")
    (tmp_path / "teamspace_operator.py").write_text(source, encoding="utf-8")
    bad = source
    for right, wrong, _ in TEAMSPACE_MISTAKES:
        bad = bad.replace(right, wrong, 1)
    (tmp_path / "bad_teamspace.py").write_text(bad, encoding="utf-8")
    errors = _pyright(tmp_path)
    assert not [e for e in errors if "bad_teamspace.py" not in e], errors
    # Pyright words them its own way; each planted mistake is one error on its own line.
    lines = {int(e.split(":")[1]) for e in errors}
    planted = {
        bad.splitlines().index(next(line for line in bad.splitlines() if wrong in line)) + 1
        for _, wrong, _ in TEAMSPACE_MISTAKES
    }
    assert planted <= lines, (planted, errors)


# The typed client beside the dynamic one, on each adapter ({aw}: "await " or nothing).
TYPED_CLIENT = """\
from typing import Any

from {module} import Client
from kubemoon_core.builtin import CONFIGMAPS, ConfigMap


{defn} use(client: Client) -> None:
    cm: ConfigMap = {aw}client.get(ConfigMap, "a", namespace="ns")
    print(cm.data)
    raw: dict[str, Any] = {aw}client.get(CONFIGMAPS, "a", namespace="ns")
    print(raw["data"])
    {loop} item in client.list(ConfigMap, namespace="ns"):
        print(item.data)
    made: ConfigMap = {aw}client.create(ConfigMap(metadata={{"name": "b"}}), namespace="ns")
    print(made.metadata)
"""
TYPED_CLIENT_MISTAKES = [
    ("print(cm.data)", "print(cm.dat)", r'"ConfigMap" has no attribute "dat"'),
    ("print(item.data)", 'print(item["data"])', r'Value of type "ConfigMap" is not indexable'),
    (
        '    print(raw["data"])\n',
        '    print(raw["data"])\n    client.list(Client)\n',
        r'Value of type variable "K" of (function|"list" of "\w+") cannot be "Client"',
    ),
    (
        'client.create(ConfigMap(metadata={"name": "b"}), namespace="ns")',
        'client.create(ConfigMap(metadata={"name": "b"}).data, namespace="ns")',
        r'No overload variant (of "create" of "\w+" )?matches argument types',
    ),
]


@pytest.mark.parametrize("module", ["kubemoon_trio", "kubemoon_asyncio", "kubemoon_sync"])
def test_mypy_checks_the_typed_client_on_every_adapter(tmp_path: Path, module: str) -> None:
    blocking = module == "kubemoon_sync"
    source = TYPED_CLIENT.format(
        module=module,
        defn="def" if blocking else "async def",
        aw="" if blocking else "await ",
        loop="for" if blocking else "async for",
    )
    (tmp_path / "typed_client.py").write_text(source, encoding="utf-8")
    bad = source
    for right, wrong, _ in TYPED_CLIENT_MISTAKES:
        assert right in bad, right
        bad = bad.replace(right, wrong, 1)
    (tmp_path / "bad_typed_client.py").write_text(bad, encoding="utf-8")
    result = subprocess.run(
        [
            *(sys.executable, "-m", "mypy", "--strict", "--no-error-summary"),
            *("--cache-dir", str(ROOT / ".mypy_cache")),
            str(tmp_path / "typed_client.py"),
            str(tmp_path / "bad_typed_client.py"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert result.returncode == 1, result.stdout + result.stderr
    assert not [e for e in errors if "bad_typed_client.py" not in e], errors
    for _, _, message in TYPED_CLIENT_MISTAKES:
        assert any(re.search(message, e) for e in errors), (message, errors)
    assert len(errors) == len(TYPED_CLIENT_MISTAKES), errors
