"""Every public name is exported once, at the path its ``__module__`` names, and documented.

The public namespaces are the packages and ``kubemoon_core``'s sub-namespaces; everything
else is a private module. Names that moved out of ``kubemoon_core``'s top level still
import from there, with a DeprecationWarning naming the new home.

This file names the old paths on purpose (migrate-imports: keep).
"""

import importlib
import inspect
import pkgutil
import re
import warnings
from pathlib import Path
from types import ModuleType

import pytest

import kubemoon_core
from kubemoon_core._public import UNPUBLISHED

CORE_NAMESPACES = [
    "kubemoon_core",
    "kubemoon_core.errors",
    "kubemoon_core.typed",
    "kubemoon_core.objects",
    "kubemoon_core.predicates",
    "kubemoon_core.webhooks",
    "kubemoon_core.sharding",
    "kubemoon_core.kubeconfig",
    "kubemoon_core.rbac",
    "kubemoon_core.json_backends",
    "kubemoon_core.lowlevel",
]
PACKAGES = [
    "kubemoon_io",
    "kubemoon_trio",
    "kubemoon_asyncio",
    "kubemoon_sync",
    "kubemoon_testing",
    "kubemoon_testing.sim",
    "kubemoon_cli",
]
# An application built on KubeMoon: documented and exported once, but it imports only public
# names (tests/unit/test_layers.py), so its objects keep their private modules' paths.
APPLICATIONS = ["configmirror"]
NAMESPACES = CORE_NAMESPACES + PACKAGES + APPLICATIONS
# The adapters re-export kubemoon_io's transport errors and configuration loaders, so that a
# controller imports everything from its loop package (documented in docs/api/adapters.rst).
ADAPTER_REEXPORTS = {
    "InsecureTLSWarning",
    "ResponseTooLarge",
    "TLSError",
    "TransportError",
    "TransportTimeout",
    "load_config",
    "load_in_cluster_config",
    "load_kubeconfig",
}
DOCS = Path(__file__).parents[2] / "docs"


def _defined_here(obj: object) -> bool:
    """A class or function KubeMoon defines (not a constant, alias or typing construct)."""
    return (inspect.isclass(obj) or inspect.isfunction(obj)) and isinstance(
        getattr(obj, "__module__", None), str
    )


def _exported(namespace: str) -> tuple[ModuleType, list[str]]:
    module = importlib.import_module(namespace)
    return module, list(module.__all__)


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_each_name_is_exported_once_documented_and_reports_its_public_path(
    namespace: str,
) -> None:
    module, names = _exported(namespace)
    assert module.__doc__, f"{namespace} has no docstring"
    assert len(names) == len(set(names)), f"{namespace} exports a name twice"
    root = namespace.split(".", 1)[0]
    for name in names:
        obj = getattr(module, name)
        if isinstance(obj, ModuleType) or not _defined_here(obj):
            continue
        if name in ADAPTER_REEXPORTS and namespace in {
            "kubemoon_trio",
            "kubemoon_asyncio",
            "kubemoon_sync",
        }:
            assert obj.__module__ == "kubemoon_io", f"{namespace}.{name}"
            continue
        if not obj.__module__.startswith(root):
            continue  # an object of another project (a typing alias, say)
        assert obj.__doc__, f"{namespace}.{name} has no docstring"
        if namespace in APPLICATIONS:
            continue
        assert obj.__module__ == namespace, (
            f"{namespace}.{name} reports {obj.__module__}, not the path users import"
        )


def test_no_kubemoon_core_object_is_exported_from_two_namespaces() -> None:
    homes: dict[int, str] = {}
    for namespace in CORE_NAMESPACES:
        module, names = _exported(namespace)
        for name in names:
            obj = getattr(module, name)
            if isinstance(obj, ModuleType) or not _defined_here(obj):
                continue
            where = f"{namespace}.{name}"
            assert id(obj) not in homes, f"{where} is also {homes[id(obj)]}"
            homes[id(obj)] = where


def test_every_object_resolved_its_annotations_and_was_published() -> None:
    assert UNPUBLISHED == []


def test_the_top_level_of_kubemoon_core_stays_short() -> None:
    # h11 exports 23 names, httpcore 49; the top level holds what most code names.
    assert len(kubemoon_core.__all__) <= 40


def test_every_private_module_s_public_names_have_a_public_home() -> None:
    exported = set()
    for namespace in CORE_NAMESPACES:
        exported |= set(_exported(namespace)[1])
    for info in pkgutil.iter_modules(kubemoon_core.__path__):
        if not info.name.startswith("_") or info.name == "_public":
            continue
        module = importlib.import_module(f"kubemoon_core.{info.name}")
        assert hasattr(module, "__all__"), f"{info.name} has no __all__"
        for name in module.__all__:
            if not name.isupper():
                assert name in exported or name == "Declared", (
                    f"kubemoon_core.{info.name}.{name} is public but has no public home"
                )


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_each_namespace_has_its_page_in_the_api_docs(namespace: str) -> None:
    pages = "".join(page.read_text() for page in (DOCS / "api").glob("*.rst"))
    if namespace in {"kubemoon_asyncio", "kubemoon_sync"}:
        # Generated twins: documented once, on the trio adapter's page, with the same names.
        assert _exported(namespace)[1] == _exported("kubemoon_trio")[1]
        assert f":mod:`{namespace}`" in (DOCS / "api" / "adapters.rst").read_text()
        return
    assert re.search(rf"^\.\. automodule:: {re.escape(namespace)}$", pages, re.M), namespace


def test_an_old_import_path_warns_and_gives_the_same_object() -> None:
    moved = kubemoon_core._MOVED
    assert len(moved) > 200
    for name, home in moved.items():
        with pytest.warns(DeprecationWarning, match=rf"{name} moved to {re.escape(home)}\.{name}"):
            old = getattr(kubemoon_core, name)
        assert old is getattr(importlib.import_module(home), name)


def test_an_old_from_import_warns_and_works() -> None:
    with pytest.warns(DeprecationWarning, match=r"kubemoon_core\.errors\.Conflict"):
        from kubemoon_core import Conflict  # type: ignore[attr-defined]
    from kubemoon_core.errors import Conflict as new

    assert Conflict is new


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
            kubemoon_core.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018


def test_the_migration_script_rewrites_old_imports() -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parents[2] / "scripts"))
    try:
        migrate = importlib.import_module("migrate_imports")
    finally:
        sys.path.pop(0)
    old = (
        "from kubemoon_core import ObjectKey, Conflict, decode  # noqa: X\n"
        "    from kubemoon_core import (\n        ApiError,\n        NotFound,\n    )\n"
        "raise kubemoon_core.NotFound\n"
    )
    assert migrate.rewrite(old) == (
        "from kubemoon_core import ObjectKey  # noqa: X\n"
        "from kubemoon_core.errors import Conflict  # noqa: X\n"
        "from kubemoon_core.typed import decode  # noqa: X\n"
        "    from kubemoon_core import ApiError\n"
        "    from kubemoon_core.errors import NotFound\n"
        "raise kubemoon_core.errors.NotFound\n"
    )


def test_change_object_prefers_new() -> None:
    from kubemoon_core import Change, ChangeType, ObjectKey

    key = ObjectKey("ns", "a")
    assert Change(ChangeType.ADDED, key, None, {"v": 1}).object == {"v": 1}
    assert Change(ChangeType.DELETED, key, {"v": 0}, None).object == {"v": 0}
