"""Loading the user's code that ``kubemoon`` commands name (``module:name``, ``file.py:name``).

Rules: a module that fails to import, or exits while importing, is a usage error
(:class:`UsageError`: printed without a traceback, exit status 2), and every piece of
the user's text in a message has its non-printable characters escaped.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from pathlib import Path

__all__ = ["UsageError", "load_module", "printable"]


class UsageError(Exception):
    """A bad argument: printed without a traceback, exit status 2."""


def printable(text: str) -> str:
    """``text`` with every non-printable character (line breaks included) escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def load_module(name: str) -> object:
    """The module named ``name`` (dotted, importable from the current directory) or the
    Python file at ``name`` (ending in ``.py``), imported."""
    if name.endswith(".py"):
        path = Path(name).resolve()
        module_name = f"_kubemoon_cli_{path.stem}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None or not path.is_file():
            raise UsageError(f"no such file: {name}")
        module = importlib.util.module_from_spec(spec)
        # dataclasses and typing.get_type_hints look the module up by name.
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:
            sys.modules.pop(module_name, None)
            raise _import_failed(name, exc) from None
        return module
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(name)
    except (Exception, SystemExit) as exc:  # the module's own code: any failure is reported
        raise _import_failed(name, exc) from None


def _import_failed(name: str, exc: BaseException) -> UsageError:
    if isinstance(exc, SystemExit):
        return UsageError(f"cannot import {printable(name)}: it called sys.exit({exc.code!r})")
    where = ""
    if exc.__traceback__ is not None:
        frames = traceback.extract_tb(exc.__traceback__)
        if frames:
            last = frames[-1]
            where = f" ({printable(last.filename)}, line {last.lineno})"
    return UsageError(f"cannot import {printable(name)}: {type(exc).__name__}: {exc}{where}")
