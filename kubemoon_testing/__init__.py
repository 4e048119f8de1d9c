"""kubemoon_testing: test tools for KubeMoon and for operators built on it.

A strict fake transport for the pure core, a scripted h11 server for faults, and a real
kube-apiserver with etcd for integration tests (see the pytest plugin).
"""

from ._fake import Exchange, FakeTransport, FakeTransportError, json_response

__all__ = ["Exchange", "FakeTransport", "FakeTransportError", "json_response"]
