"""Predicates that filter which changes reach a reconcile."""

from ._controller import (
    Predicate,
    all_of,
    annotations_changed,
    any_of,
    generation_changed,
    labels_changed,
    negate,
)
from ._public import publish

__all__ = [
    "all_of",
    "annotations_changed",
    "any_of",
    "generation_changed",
    "labels_changed",
    "negate",
    "Predicate",
]

publish(__name__, globals(), __all__)
