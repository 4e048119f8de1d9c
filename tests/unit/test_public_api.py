"""Every public name is exported once, documented, and defined in a private module."""

import importlib

import pytest

PACKAGES = ["kubemoon_core", "kubemoon_testing", "kubemoon_cli"]


@pytest.mark.parametrize("package", PACKAGES)
def test_public_names_are_exported_once_and_documented(package: str) -> None:
    module = importlib.import_module(package)
    names = module.__all__
    assert len(names) == len(set(names)), "a name is exported twice"
    for name in names:
        obj = getattr(module, name)
        if callable(obj):
            assert obj.__doc__, f"{package}.{name} has no docstring"
            assert obj.__module__.startswith(f"{package}."), f"{name} is not from a private module"


def test_every_private_module_lists_its_public_names() -> None:
    import pkgutil

    import kubemoon_core

    exported = set(kubemoon_core.__all__)
    for info in pkgutil.iter_modules(kubemoon_core.__path__):
        if not info.name.startswith("_"):
            continue  # a public subpackage (builtin) has its own namespace
        module = importlib.import_module(f"kubemoon_core.{info.name}")
        assert hasattr(module, "__all__"), f"{info.name} has no __all__"
        for name in module.__all__:
            if not name.isupper():
                assert name in exported, f"{info.name}.{name} is public but not exported"


def test_change_object_prefers_new() -> None:
    from kubemoon_core import Change, ChangeType, ObjectKey

    key = ObjectKey("ns", "a")
    assert Change(ChangeType.ADDED, key, None, {"v": 1}).object == {"v": 1}
    assert Change(ChangeType.DELETED, key, {"v": 0}, None).object == {"v": 0}
