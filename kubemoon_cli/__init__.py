"""The ``kubemoon`` command: tools for operator authors (CRD generation and checks)."""

from ._main import main

__all__ = ["main"]
