"""The Kubernetes releases the test environment supports: the one list everything reads.

Rules of this module:

- :data:`SUPPORTED_RELEASES` names each supported minor with its patch release and the etcd
  version that release pins (``build/dependencies.yaml`` of the release, which can be newer
  than the etcd its ``go.mod`` requires). The newest is the default.
- The Go module of each release (``kubemoon_testing/testenv/<version>/go.mod`` and
  ``go.sum``, the newest in ``testenv/`` itself) is rendered from this list
  (:func:`kubemoon_testing._testenv_module.render_gomod`) and checked against it by
  ``kubemoon-testenv module --check``.
- Feature gates are listed with the first minor that knows them, so a gate is passed only
  to a kube-apiserver that has it (an unknown gate makes kube-apiserver exit).
- Only the standard library, no I/O.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_RELEASE",
    "FEATURE_GATES",
    "SUPPORTED_RELEASES",
    "VERSION_ENV",
    "KubernetesRelease",
    "UnsupportedVersionError",
    "gates_for",
    "parse_version",
    "release_for",
    "selected_version",
]

#: Chooses the default Kubernetes version of the test environment (``1.36`` or ``v1.36.3``).
VERSION_ENV = "KUBEMOON_KUBERNETES_VERSION"

_VERSION = re.compile(r"v?1\.(\d+)(?:\.(\d+))?")


class UnsupportedVersionError(ValueError):
    """A Kubernetes version that is malformed or not supported; the message lists the
    supported ones."""


@dataclass(frozen=True, slots=True)
class KubernetesRelease:
    """One supported Kubernetes release of the test environment."""

    #: ``v1.X.Y``.
    version: str
    #: The etcd version (``v3.X.Y``) this release pins in ``build/dependencies.yaml``.
    etcd: str

    @property
    def minor(self) -> int:
        """``X`` of ``v1.X.Y``."""
        return int(self.version.split(".")[1])

    @property
    def minor_version(self) -> str:
        """``1.X``."""
        return f"1.{self.minor}"


#: Oldest first; the last one is the newest and the default. Moving the list: see
#: docs/support.rst.
SUPPORTED_RELEASES: tuple[KubernetesRelease, ...] = (
    KubernetesRelease("v1.35.4", etcd="v3.6.6"),
    KubernetesRelease("v1.36.3", etcd="v3.6.8"),
    KubernetesRelease("v1.37.2", etcd="v3.7.0"),
)
DEFAULT_RELEASE = SUPPORTED_RELEASES[-1]

#: Feature gates the test environment may turn on, with the first minor that has them.
FEATURE_GATES: dict[str, int] = {
    # Server-side sharded list and watch (the shard selector); alpha in 1.36.
    "ShardedListAndWatch": 36,
}


def parse_version(text: str) -> tuple[int, int | None]:
    """``(minor, patch)`` of ``1.X``, ``v1.X``, ``1.X.Y`` or ``v1.X.Y`` (patch ``None`` when
    not given); :class:`UnsupportedVersionError` when it is not of that form."""
    match = _VERSION.fullmatch(text.strip())
    if match is None:
        raise UnsupportedVersionError(
            f"not a Kubernetes version: {text!r} (expected 1.X or v1.X.Y; supported: "
            f"{_supported()})"
        )
    return int(match.group(1)), None if match.group(2) is None else int(match.group(2))


def _supported() -> str:
    return ", ".join(r.version for r in SUPPORTED_RELEASES)


def release_for(text: str) -> KubernetesRelease:
    """The supported release ``text`` names: a minor (``1.36``) means its listed patch
    release; a full version must be one listed. :class:`UnsupportedVersionError` otherwise."""
    minor, patch = parse_version(text)
    for release in SUPPORTED_RELEASES:
        if release.minor == minor and (patch is None or release.version == f"v1.{minor}.{patch}"):
            return release
    raise UnsupportedVersionError(
        f"Kubernetes {text.strip()} is not supported by the test environment "
        f"(supported: {_supported()})"
    )


def selected_version(version: str | None = None) -> str:
    """The ``v1.X.Y`` to use: ``version`` if given, else ``$KUBEMOON_KUBERNETES_VERSION``,
    else the newest supported release. A minor means its supported patch release."""
    if version is None:
        version = os.environ.get(VERSION_ENV, "").strip() or None
    if version is None:
        return DEFAULT_RELEASE.version
    return release_for(version).version


def gates_for(version: str, gates: dict[str, bool]) -> dict[str, bool]:
    """The subset of ``gates`` that kube-apiserver ``version`` knows (gates not listed in
    :data:`FEATURE_GATES` are passed as they are)."""
    minor, _patch = parse_version(version)
    return {name: on for name, on in gates.items() if FEATURE_GATES.get(name, 0) <= minor}
