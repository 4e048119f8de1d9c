"""Installing CustomResourceDefinitions on the test kube-apiserver.

Rules: a source is a YAML file (one or more CRD documents), a CRD manifest, a class declared
with :func:`kubemoon_core.typed.custom_resource` or a tuple of such classes (one kind's
versions); anything else, or a document that is not a CRD with versions and names, raises
:class:`CrdInstallError`. Installing creates every CRD, then waits until each is
``Established`` and its first served version answers a LIST. PyYAML and the core are
imported only when a source needs them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._apiserver_errors import CrdInstallError
from ._stdlib_http import RawResponse

__all__ = ["CrdSource"]

#: What ``ApiServer(crds=...)`` takes: a YAML file, a CRD manifest, a declared class, or the
#: declared classes of one kind's versions.
CrdSource = str | os.PathLike[str] | Mapping[str, Any] | type | tuple[type, ...]
_CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _crd_manifests(source: CrdSource) -> list[dict[str, Any]]:
    """The CRD manifests ``source`` stands for (imports PyYAML and the core lazily)."""
    if isinstance(source, (type, tuple)):
        from kubemoon_core import KubeMoonError  # noqa: PLC0415
        from kubemoon_core.typed import crd_manifest  # noqa: PLC0415

        classes = (source,) if isinstance(source, type) else source
        try:
            return [crd_manifest(*classes)]
        except KubeMoonError as exc:
            raise CrdInstallError(f"cannot make a CRD of {classes!r}: {exc}") from None
    if isinstance(source, Mapping):
        documents: list[Any] = [dict(source)]
        where = "a CRD manifest"
    else:
        import yaml  # noqa: PLC0415

        where = os.fspath(source)
        try:
            with open(where, encoding="utf-8") as f:
                documents = [d for d in yaml.safe_load_all(f) if d is not None]
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise CrdInstallError(f"cannot read CRDs from {where}: {exc}") from None
    for document in documents:
        if not (
            isinstance(document, dict)
            and document.get("kind") == "CustomResourceDefinition"
            and isinstance(document.get("spec"), dict)
            and isinstance(document["spec"].get("versions"), list)
            and isinstance(document["spec"].get("names"), dict)
        ):
            raise CrdInstallError(f"{where}: not a CustomResourceDefinition with versions")
    if not documents:
        raise CrdInstallError(f"{where}: no CustomResourceDefinition in it")
    return documents


# ApiServer.request: method, path and keyword arguments (``body``) to a whole response.
Request = Callable[..., RawResponse]


def install_crds(request: Request, crds: Sequence[CrdSource], timeout: float) -> list[str]:
    """Create the CRDs of ``crds`` through ``request``; their names once each is served."""
    manifests = [m for source in crds for m in _crd_manifests(source)]
    names: list[str] = []
    for manifest in manifests:
        name = str(manifest.get("metadata", {}).get("name", ""))
        resp = request("POST", _CRDS, body=manifest)
        if resp.status != 201:
            raise CrdInstallError(
                f"CRD {name or '<unnamed>'}: {resp.status} {resp.reason}: "
                f"{resp.body[:500].decode(errors='replace')}"
            )
        names.append(name)
    deadline = time.monotonic() + timeout
    for manifest, name in zip(manifests, names, strict=True):
        # The apiserver accepted it, so these fields exist; serve-check the first served
        # version (none served: Established is all there is to wait for).
        spec = manifest["spec"]
        version = next((v["name"] for v in spec["versions"] if v.get("served")), None)
        served = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}?limit=1"
        while not (
            _established(request, name)
            and (version is None or request("GET", served).status == 200)
        ):
            if time.monotonic() >= deadline:
                raise CrdInstallError(f"CRD {name} not established after {timeout:.0f} s")
            time.sleep(0.05)
    return names


def _established(request: Request, name: str) -> bool:
    resp = request("GET", f"{_CRDS}/{name}")
    if resp.status != 200:
        return False
    conditions = resp.json().get("status", {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)
