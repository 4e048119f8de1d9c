"""The errors of the test kube-apiserver (:class:`~kubemoon_testing.ApiServer`)."""

from __future__ import annotations

__all__ = ["ApiServerError", "CrdInstallError", "MissingBinariesError"]


class ApiServerError(RuntimeError):
    """The test kube-apiserver or etcd could not be started, reached or driven."""


class MissingBinariesError(ApiServerError):
    """A binary is not built yet (run ``kubemoon-testenv build``; it needs Go)."""


class CrdInstallError(ApiServerError):
    """A CRD given to :class:`ApiServer` could not be read, created or established."""


class _PortInUse(ApiServerError):
    """A child could not bind its port; start() retries with new ports."""
