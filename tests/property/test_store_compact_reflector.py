"""The reflector model test (tests/property/test_reflector_model.py) over a compact store.

The same machine, the same invariants (the store is exactly the server's state at the
reflector's resourceVersion after every step; every relist has a cause; the requests
have the required shape), with each reflector's store swapped for a
``Store(compact=True)`` before its first request, and one more invariant: every object's
``Store.resource_version`` is the one its decoded copy carries.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis.stateful import invariant
from test_reflector_model import ReflectorMachine

from kubemoon_core._reflector import Reflector
from kubemoon_core.lowlevel import Store


class CompactReflectorMachine(ReflectorMachine):
    """ReflectorMachine whose reflector keeps its objects as JSON bytes."""

    @property
    def reflector(self) -> Reflector:
        return self._compact_reflector

    @reflector.setter
    def reflector(self, value: Reflector) -> None:
        # setup() assigns a fresh reflector: nothing has been stored in it yet.
        assert len(value.store) == 0
        value._store = Store(compact=True)
        self._compact_reflector = value

    @invariant()
    def resource_versions_read_without_decoding_agree(self) -> None:
        if not hasattr(self, "_compact_reflector"):
            return
        store = self._compact_reflector.store
        assert store.compact
        for key, obj in store.items():
            assert store.resource_version(key) == obj["metadata"]["resourceVersion"]


CompactReflectorMachine.TestCase.settings = settings(
    settings(), stateful_step_count=40, deadline=None
)
TestCompactReflectorModel = CompactReflectorMachine.TestCase
