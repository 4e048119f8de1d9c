"""Public paths for objects defined in private modules, and the old paths that still work.

Objects are defined in ``kubemoon_core._*`` and exported from one public namespace each;
:func:`publish` sets their ``__module__`` to that namespace, so reprs, tracebacks, pickles
and the docs show the path a user imports. A class's own annotations are resolved first,
against the module that defines them: typing and msgspec look annotations up in
``sys.modules[cls.__module__]``, which after the move no longer holds the names they use.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Mapping
from typing import Any

__all__: list[str] = []

# Objects whose annotations could not be resolved keep their private module (a test asserts
# this stays empty).
UNPUBLISHED: list[str] = []


def _resolve_own_annotations(cls: type) -> bool:
    own = cls.__dict__.get("__annotations__")  # noqa: RUF063 - the class's own, unevaluated
    if not own or not any(isinstance(value, str) for value in own.values()):
        return True
    module = sys.modules[cls.__module__]
    namespace = {**vars(module), cls.__name__: cls}
    resolved: dict[str, Any] = {}
    for name, annotation in own.items():
        if not isinstance(annotation, str):
            resolved[name] = annotation
            continue
        try:
            resolved[name] = eval(annotation, namespace)
        except Exception:
            return False
    cls.__annotations__ = resolved
    return True


def publish(namespace: str, names: Mapping[str, Any], exported: list[str]) -> None:
    """Give each object of ``exported`` defined in a private module of ``namespace``'s package
    ``namespace`` as its module (``kubemoon_trio._manager.Manager`` becomes
    ``kubemoon_trio.Manager``); objects of other packages keep their own paths."""
    private = namespace.split(".", 1)[0] + "._"
    for name in exported:
        obj = names[name]
        module = getattr(obj, "__module__", None)
        if not isinstance(module, str) or not module.startswith(private):
            continue  # constants, aliases of typing objects, already published
        if isinstance(obj, type):
            if not _resolve_own_annotations(obj):
                UNPUBLISHED.append(f"{module}.{name}")
                continue
        elif not callable(obj):
            continue
        try:
            obj.__module__ = namespace
            if isinstance(obj, type) and obj.__qualname__ != name:
                # Exported under another name (``RbacDeclared``): the path must resolve.
                obj.__qualname__ = obj.__name__ = name
        except (AttributeError, TypeError):
            UNPUBLISHED.append(f"{module}.{name}")


def moved_attribute(package: str, moved: Mapping[str, str], name: str) -> Any:
    """Look up ``name`` at its new home for an old ``package.name`` access, with a warning."""
    home = moved.get(name)
    if home is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    warnings.warn(
        f"{package}.{name} moved to {home}.{name}; the old path works until KubeMoon 1.1",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(importlib.import_module(home), name)
