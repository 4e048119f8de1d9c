"""The ``kubemoon`` command: tools for operator authors (CRD generation and checks)."""

from kubemoon_core._public import publish

from ._main import main

__all__ = ["main"]

# Objects report the path users import them from, not the private module.
publish(__name__, globals(), __all__)
