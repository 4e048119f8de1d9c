"""A real kube-apiserver, etcd and kube-controller-manager on 127.0.0.1, for tests and demos.

This module is the fixture object, :class:`ApiServer`: its options, starting and stopping the
three processes in order, and the helpers tests call. The pieces it drives live beside it:
``_processes`` (children that never outlive Python), ``_pki`` (certificates and keys),
``_config_files`` (kubeconfigs, tokens, tracing and admission configuration),
``_command_lines`` (the flags of each process), ``_crds`` (installing CRDs),
``_stdlib_http`` (its own HTTP client), ``_users`` (the identities) and
``_apiserver_errors``.

Rules of this module:

- Binaries come from ``kubemoon-testenv build`` (``make testenv`` in the KubeMoon
  repository); nothing is downloaded here.
- Only the standard library is imported at module level, so importing ``kubemoon_testing``
  (and loading its pytest plugin) never needs the optional ``cryptography`` package; it is
  imported when a server actually starts, to generate the certificates.
- HTTP to the server uses ``http.client`` and ``ssl`` only: this is a test fixture and must
  not depend on the KubeMoon adapters it helps to test.
- Child processes never outlive the Python process (see ``kubemoon_testing._processes``);
  an ``atexit`` hook stops every server still running.
"""

# Longer than 700 lines because it is one object, the ApiServer fixture, kept in one file:
# the class docstring documents its fourteen options, and the connection facts and test
# helpers (namespaces, RBAC grants, CRDs, etcd) are its methods. What it drives is
# elsewhere: processes, PKI, config files, command lines, CRD installation and HTTP.
from __future__ import annotations

import atexit
import contextlib
import http.client
import json
import os
import secrets
import shutil
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from ._apiserver_errors import ApiServerError, MissingBinariesError, _PortInUse
from ._command_lines import apiserver_command, controller_manager_command, etcd_command
from ._config_files import (
    write_admission_config,
    write_controller_manager_kubeconfig,
    write_kubeconfig,
    write_tokens,
    write_tracing_config,
)
from ._crds import CrdSource, install_crds
from ._pki import _generate_pki, _Pki
from ._processes import (
    _OWNER_FILE,
    _WORK_DIR_PREFIX,
    _Child,
    _free_port,
    _remove_orphaned_work_dirs,
)
from ._stdlib_http import RawResponse, _b64, etcd_healthy, etcd_post, https_request
from ._users import ADMIN_USER, LIMITED_USER, MONITORING_USER, NOBODY_USER
from ._versions import DEFAULT_RELEASE, gates_for, selected_version

__all__ = ["KUBERNETES_VERSION", "ApiServer", "controller_manager_wanted", "default_binary_dir"]

#: The newest supported Kubernetes release: what ``kubemoon-testenv build`` builds and
#: ``ApiServer`` runs unless a version is chosen (``$KUBEMOON_KUBERNETES_VERSION``, the
#: ``version`` argument, the pytest option ``--kubernetes-version``).
KUBERNETES_VERSION = DEFAULT_RELEASE.version
#: ``0``/``1`` makes ``ApiServer()`` default to ``controller_manager=False``/``True``.
_CONTROLLER_MANAGER_ENV = "KUBEMOON_TESTENV_CONTROLLER_MANAGER"
_BUILD_HINT = (
    "run `kubemoon-testenv build --version {version}` (it needs Go >= 1.26 on PATH and "
    "builds them once per machine; `make testenv` does the same in the KubeMoon repository), "
    "or set "
    "KUBEMOON_TESTENV_DIR to the cache directory that has them"
)


def default_binary_dir(version: str | None = None) -> Path:
    """The directory where ``kubemoon-testenv build`` puts the binaries of ``version``.

    ``version`` is a supported release (``v1.36.3``) or minor (``1.36``); by default
    ``$KUBEMOON_KUBERNETES_VERSION``, else the newest supported release. The directory is
    ``$KUBEMOON_TESTENV_DIR/<version>`` if that variable is set, else
    ``${XDG_CACHE_HOME:-~/.cache}/kubemoon/testenv/<version>`` (what
    ``kubemoon-testenv path`` prints). An unsupported version raises
    :class:`~kubemoon_testing.UnsupportedVersionError`.
    """
    base = os.environ.get("KUBEMOON_TESTENV_DIR")
    if not base:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
        base = os.path.join(cache, "kubemoon", "testenv")
    return Path(base) / selected_version(version)


def controller_manager_wanted(binary_dir: str | os.PathLike[str] | None = None) -> bool:
    """Whether ``ApiServer()`` runs kube-controller-manager when not told: ``False`` if
    ``KUBEMOON_TESTENV_CONTROLLER_MANAGER=0``, ``True`` if it is ``1``, else whether the
    binary is built in ``binary_dir`` (default :func:`default_binary_dir`)."""
    setting = os.environ.get(_CONTROLLER_MANAGER_ENV, "").strip()
    if setting in ("0", "1"):
        return setting == "1"
    directory = Path(binary_dir) if binary_dir is not None else default_binary_dir()
    return os.access(directory / "kube-controller-manager", os.X_OK)


_LIVE: set[ApiServer] = set()


@atexit.register
def _stop_all() -> None:
    """Stop every server still running when the interpreter exits."""
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.stop()


# --- the server -------------------------------------------------------------------------------


class ApiServer:
    """A real ``kube-apiserver`` backed by its own ``etcd``, both on 127.0.0.1, and a
    ``kube-controller-manager`` running the garbage collector and the namespace controller.

    Use as a context manager or call :meth:`start` and :meth:`stop`::

        with ApiServer() as server:
            print(server.url, server.kubeconfig_path)

    Everything lives in a fresh temporary directory that :meth:`stop` removes: etcd's
    data, the generated CA and certificates, the token file, kubeconfigs and the logs
    of every process. Identities:

    - ``admin_token`` (user :data:`ADMIN_USER`, group ``system:masters``) and the admin
      client certificate (``client_cert_file``/``client_key_file``) bypass RBAC;
    - ``tokens[NOBODY_USER]`` is authenticated but authorized for nothing;
    - ``tokens[LIMITED_USER]`` gets rights in a namespace through
      :meth:`grant_namespace_access`.

    The controller manager (``controller_manager=True``, the default) runs only the
    garbage collector (owner references: background, foreground and orphan deletion) and
    the namespace controller (a deleted namespace empties and disappears), with its own
    client certificate (:data:`CONTROLLER_MANAGER_USER`, group ``system:masters``),
    ``--leader-elect=false`` and no serving port. :meth:`start` returns once the garbage
    collector has collected a probe object. Nothing else runs: no ServiceAccount tokens,
    no pods, no nodes. Use a fresh namespace per test (:meth:`create_namespace`). An
    instance is not thread-safe.

    :param version: the Kubernetes release to run: a supported minor (``"1.36"``) or its
        release (``"v1.36.3"``); default ``$KUBEMOON_KUBERNETES_VERSION``, else the newest
        (:data:`KUBERNETES_VERSION`). :attr:`version` says which; an unsupported one raises
        :class:`~kubemoon_testing.UnsupportedVersionError`.
    :param binary_dir: directory with ``kube-apiserver`` and ``etcd``; defaults to
        :func:`default_binary_dir` of ``version``.
    :param feature_gates: kube-apiserver feature gates to set (``{"ShardedListAndWatch":
        True}``). A gate the version does not have (see
        :data:`~kubemoon_testing.FEATURE_GATES`) is left out, as kube-apiserver would exit
        on it; :attr:`feature_gates` says what was passed, :meth:`has_feature` asks.
    :param watch_cache: ``False`` passes ``--watch-cache=false`` so that reads and watches
        go straight to etcd (needed to observe :meth:`compact` through the API).
    :param min_request_timeout: ``--min-request-timeout`` in seconds: a watch without
        ``timeoutSeconds`` is closed by the server at a random time in [N, 2N].
    :param extra_args: more ``kube-apiserver`` flags, appended last (so they win).
    :param startup_timeout: seconds to wait for readiness before giving up.
    :param keep_work_dir: keep the temporary directory (logs, certificates) after stop.
    :param controller_manager: start ``kube-controller-manager``. ``None`` (the default)
        asks :func:`controller_manager_wanted`: yes if it is built (envtest archives lack
        it; ``kubemoon-testenv build`` builds it with Go), unless the environment variable
        ``KUBEMOON_TESTENV_CONTROLLER_MANAGER`` says ``0`` (never) or ``1`` (always: a
        missing binary is an error). ``False`` gives the bare API, where deleted namespaces
        stay ``Terminating`` and nothing is garbage collected; :attr:`controller_manager`
        says which mode a server runs in.
    :param controller_manager_args: more ``kube-controller-manager`` flags, appended last.
    :param crds: CustomResourceDefinitions to install once the API serves and *before*
        the controller manager starts, so its garbage collector knows their kinds from the
        first moment (a CRD added later is noticed only at its next discovery resync, about
        30 s on). Each item is a YAML file (one or more CRD documents), a CRD manifest
        (a mapping), a class declared with :func:`kubemoon_core.typed.custom_resource`, or a
        tuple of such classes (the versions of one kind). :meth:`start` returns once every
        one is ``Established`` and served; :attr:`crds` lists their names.
    :param tracing_endpoint: ``host:port`` of an OTLP/gRPC receiver: kube-apiserver is
        started with ``--tracing-config-file`` (``TracingConfiguration``,
        ``apiserver.config.k8s.io/v1``) exporting its spans there. It adopts the
        ``traceparent`` of trusted callers only (``system:masters``, ``system:monitoring``:
        ``tokens[MONITORING_USER]``); for others it links to the caller's span.
    :param tracing_sampling_rate_per_million: the configuration's
        ``samplingRatePerMillion``; ``None`` leaves it unset (follow the caller's decision).
    :param webhook_client_certificate: start kube-apiserver with an
        ``--admission-control-config-file`` whose admission webhook kubeconfig gives every
        webhook host (``*``) a client certificate signed by :attr:`ca_file`
        (:attr:`webhook_client_cert_file`): a webhook server that demands client
        certificates from that CA (mutual TLS) accepts the apiserver's calls. Servers that
        ask for no certificate see no difference.
    """

    def __init__(
        self,
        *,
        version: str | None = None,
        binary_dir: str | os.PathLike[str] | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        watch_cache: bool = True,
        min_request_timeout: int | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 60.0,
        keep_work_dir: bool = False,
        controller_manager: bool | None = None,
        controller_manager_args: Sequence[str] = (),
        crds: Sequence[CrdSource] = (),
        tracing_endpoint: str | None = None,
        tracing_sampling_rate_per_million: int | None = None,
        webhook_client_certificate: bool = True,
    ) -> None:
        self._version = selected_version(version)
        self._binary_dir = (
            Path(binary_dir) if binary_dir is not None else default_binary_dir(self._version)
        )
        self._feature_gates = gates_for(self._version, dict(feature_gates or {}))
        if controller_manager is None:
            controller_manager = controller_manager_wanted(self._binary_dir)
        self._watch_cache = watch_cache
        self._min_request_timeout = min_request_timeout
        self._extra_args = tuple(extra_args)
        self._startup_timeout = startup_timeout
        self._keep_work_dir = keep_work_dir
        self._with_kcm = controller_manager
        self._kcm_args = tuple(controller_manager_args)
        self._crd_sources = tuple(crds)
        self._crd_names: tuple[str, ...] = ()
        self._tracing_endpoint = tracing_endpoint
        self._tracing_rate = tracing_sampling_rate_per_million
        self._webhook_client_certificate = webhook_client_certificate
        self._kcm: _Child | None = None
        self._work_dir: Path | None = None
        self._pki: _Pki | None = None
        self._tokens: dict[str, str] = {}
        self._port = 0
        self._etcd_port = 0
        self._etcd: _Child | None = None
        self._apiserver: _Child | None = None
        self._ssl: ssl.SSLContext | None = None
        self._ssl_cert: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        state = self.url if self._apiserver is not None else "stopped"
        return f"<ApiServer {self._version} {state}>"

    @property
    def version(self) -> str:
        """The Kubernetes release this server runs (``v1.X.Y``)."""
        return self._version

    @property
    def minor(self) -> int:
        """``X`` of :attr:`version`."""
        return int(self._version.split(".")[1])

    @property
    def feature_gates(self) -> Mapping[str, bool]:
        """The feature gates passed to kube-apiserver (those of ``feature_gates`` that this
        version has)."""
        return dict(self._feature_gates)

    def has_feature(self, gate: str) -> bool:
        """Whether ``gate`` is on: passed as ``True`` and known to this version."""
        return self._feature_gates.get(gate, False)

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> ApiServer:
        """Start etcd, kube-apiserver and (if enabled) kube-controller-manager; return once
        the API serves requests and the garbage collector works.

        Raises :class:`MissingBinariesError` if the binaries are not built and
        :class:`ApiServerError` (with the end of the logs) if startup fails.
        """
        if self._work_dir is not None:
            raise ApiServerError("ApiServer.start() called twice")
        apiserver_bin = self._binary_dir / "kube-apiserver"
        etcd_bin = self._binary_dir / "etcd"
        needed = [apiserver_bin, etcd_bin]
        if self._with_kcm:
            needed.append(self._binary_dir / "kube-controller-manager")
        missing = [p.name for p in needed if not os.access(p, os.X_OK)]
        if missing:
            off = (
                "; or pass controller_manager=False to run without the controller manager"
                if missing == ["kube-controller-manager"]
                else ""
            )
            raise MissingBinariesError(
                f"{', '.join(missing)} {self._version} not found in "
                f"{self._binary_dir}: {_BUILD_HINT.format(version=self._version)}{off}"
            )
        _remove_orphaned_work_dirs()
        self._work_dir = Path(tempfile.mkdtemp(prefix=_WORK_DIR_PREFIX))
        (self._work_dir / _OWNER_FILE).write_text(str(os.getpid()), encoding="ascii")
        _LIVE.add(self)
        try:
            self._prepare()
            for attempt in range(3):
                try:
                    self._launch(etcd_bin, apiserver_bin)
                    break
                except _PortInUse:
                    # Another process took a port between _free_port() and bind: retry.
                    self._stop_children()
                    if attempt == 2:
                        raise
            if self._crd_sources:
                self._crd_names = tuple(self.install_crds(self._crd_sources))
            if self._with_kcm:
                self._start_controller_manager()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL) and remove the work directory.

        Safe to call more than once and after a failed :meth:`start`.
        """
        try:
            self._stop_children()
        finally:
            _LIVE.discard(self)
            if self._work_dir is not None and not self._keep_work_dir:
                shutil.rmtree(self._work_dir, ignore_errors=True)
            self._work_dir = None
            self._ssl = self._ssl_cert = None

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port, certificates and etcd.

        Returns once it serves requests again. Open connections and watches are closed;
        the controller manager keeps running and reconnects by itself.
        """
        if self._apiserver is None:
            raise ApiServerError("the apiserver is not running")
        self._apiserver.stop(timeout=10.0)
        self._apiserver = None
        self._start_apiserver(self._binary_dir / "kube-apiserver")
        self._wait_apiserver_ready(time.monotonic() + self._startup_timeout)

    def _stop_children(self) -> None:
        # Clients first: each would only log connection errors to the next one otherwise.
        for child in (self._kcm, self._apiserver, self._etcd):
            if child is not None:
                child.stop(timeout=5.0)
        self._kcm = self._apiserver = self._etcd = None

    def _prepare(self) -> None:
        assert self._work_dir is not None
        self._pki = _generate_pki(self._work_dir)
        self._tokens = {
            user: secrets.token_urlsafe(24)
            for user in (ADMIN_USER, NOBODY_USER, LIMITED_USER, MONITORING_USER)
        }
        write_tokens(self._work_dir, self._tokens)
        self._ssl = ssl.create_default_context(cafile=str(self._pki.ca_file))
        self._ssl_cert = ssl.create_default_context(cafile=str(self._pki.ca_file))
        self._ssl_cert.load_cert_chain(str(self._pki.client_cert), str(self._pki.client_key))

    def _launch(self, etcd_bin: Path, apiserver_bin: Path) -> None:
        assert self._work_dir is not None
        self._etcd_port = _free_port()
        self._port = _free_port()
        while self._port == self._etcd_port:
            self._port = _free_port()
        deadline = time.monotonic() + self._startup_timeout
        self._etcd = _Child(
            "etcd",
            etcd_command(etcd_bin, self._work_dir, self.etcd_url),
            self._work_dir / "etcd.log",
        )
        self._wait(deadline, self._etcd, self._etcd_healthy, "etcd to be healthy")
        # One write outside /registry moves a fresh etcd past revision 1 before the
        # apiserver's watch caches make their first LIST. A cache initialized at revision 1
        # would serve a watch from resourceVersion=1 instead of answering 410 Expired, as a
        # real cluster (whose caches never start at revision 1) does.
        self._etcd_post("/v3/kv/put", {"key": _b64(b"/kubemoon/testenv"), "value": _b64(b"1")})
        assert self._pki is not None
        write_kubeconfig(self._work_dir, self.url, self._pki, self._tokens)
        self._start_apiserver(apiserver_bin)
        self._wait_apiserver_ready(deadline)

    def _start_apiserver(self, apiserver_bin: Path) -> None:
        assert self._work_dir is not None
        assert self._pki is not None
        admission_config = tracing_config = None
        if self._webhook_client_certificate:
            admission_config = write_admission_config(self._work_dir, self._pki)
        if self._tracing_endpoint is not None:
            tracing_config = write_tracing_config(
                self._work_dir, self._tracing_endpoint, self._tracing_rate
            )
        args = apiserver_command(
            apiserver_bin,
            etcd_url=self.etcd_url,
            port=self._port,
            work_dir=self._work_dir,
            pki=self._pki,
            admission_config=admission_config,
            watch_cache=self._watch_cache,
            min_request_timeout=self._min_request_timeout,
            tracing_config=tracing_config,
            feature_gates=self._feature_gates,
            extra_args=self._extra_args,
        )
        self._apiserver = _Child("kube-apiserver", args, self._work_dir / "kube-apiserver.log")

    def _start_controller_manager(self) -> None:
        assert self._work_dir is not None
        assert self._pki is not None
        kubeconfig = write_controller_manager_kubeconfig(self._work_dir, self.url, self._pki)
        args = controller_manager_command(
            self._binary_dir / "kube-controller-manager", kubeconfig, self._kcm_args
        )
        self._kcm = _Child(
            "kube-controller-manager", args, self._work_dir / "kube-controller-manager.log"
        )
        self._wait_garbage_collector(time.monotonic() + self._startup_timeout)

    def _wait_garbage_collector(self, deadline: float) -> None:
        """Delete a probe owner and wait until the garbage collector removes its dependent."""
        assert self._kcm is not None
        base = "/api/v1/namespaces/default/configmaps"
        name = f"kubemoon-gc-probe-{secrets.token_hex(4)}"
        owner = self._checked(
            "POST", base, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
        )
        reference = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": name,
            "uid": owner["metadata"]["uid"],
        }
        self._checked(
            "POST",
            base,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{name}-dependent", "ownerReferences": [reference]},
            },
        )
        self._checked(
            "DELETE",
            f"{base}/{name}",
            {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"},
        )
        self._wait(
            deadline,
            self._kcm,
            lambda: self.request("GET", f"{base}/{name}-dependent", timeout=2.0).status == 404,
            "the garbage collector to delete a probe object",
        )

    def _wait_apiserver_ready(self, deadline: float) -> None:
        assert self._apiserver is not None
        self._wait(deadline, self._apiserver, self._apiserver_ready, "/readyz to answer ok")
        # /readyz can pass before the bootstrap controller has created `default`.
        self._wait(
            deadline,
            self._apiserver,
            self._default_namespace_exists,
            "the default namespace to exist",
        )

    def _wait(self, deadline: float, child: _Child, check: Callable[[], bool], what: str) -> None:
        while True:
            code = child.exited()
            if code is not None:
                tail = child.log_tail()
                if "address already in use" in tail:
                    raise _PortInUse(f"{child.name}: address already in use")
                raise ApiServerError(
                    f"{child.name} exited with code {code} while waiting for {what}; "
                    f"last lines of {child.log_path}:\n{tail}"
                )
            try:
                if check():
                    return
            except (OSError, http.client.HTTPException, ValueError):
                pass  # not listening yet, or answering garbage while starting
            if time.monotonic() >= deadline:
                raise ApiServerError(
                    f"timed out after {self._startup_timeout:.0f} s waiting for {what}; "
                    f"last lines of {child.log_path}:\n{child.log_tail()}"
                )
            time.sleep(0.1)

    def _etcd_healthy(self) -> bool:
        return etcd_healthy(self._etcd_port)

    def _apiserver_ready(self) -> bool:
        resp = self.request("GET", "/readyz", user=None, timeout=2.0)
        return resp.status == 200 and resp.body.strip() == b"ok"

    def _default_namespace_exists(self) -> bool:
        return self.request("GET", "/api/v1/namespaces/default", timeout=2.0).status == 200

    # -- connection facts ----------------------------------------------------------------

    def _started(self) -> tuple[Path, _Pki]:
        if self._work_dir is None or self._pki is None:
            raise ApiServerError("the ApiServer is not started")
        return self._work_dir, self._pki

    @property
    def url(self) -> str:
        """``https://127.0.0.1:PORT``."""
        self._started()
        return f"https://127.0.0.1:{self._port}"

    @property
    def port(self) -> int:
        """The apiserver's secure port on 127.0.0.1."""
        self._started()
        return self._port

    @property
    def etcd_url(self) -> str:
        """``http://127.0.0.1:PORT`` of etcd (gRPC and its JSON gateway, no TLS)."""
        self._started()
        return f"http://127.0.0.1:{self._etcd_port}"

    @property
    def work_dir(self) -> Path:
        """The temporary directory with certificates, kubeconfig, etcd data and logs."""
        return self._started()[0]

    @property
    def ca_file(self) -> Path:
        """PEM file of the CA that signed the serving and client certificates."""
        return self._started()[1].ca_file

    @property
    def ca_pem(self) -> str:
        """The CA certificate as PEM text."""
        return self._started()[1].ca_pem

    @property
    def client_cert_file(self) -> Path:
        """Admin client certificate (CN=kubemoon-admin, O=system:masters)."""
        return self._started()[1].client_cert

    @property
    def client_key_file(self) -> Path:
        """Private key of :attr:`client_cert_file`."""
        return self._started()[1].client_key

    @property
    def webhook_client_cert_file(self) -> Path:
        """The client certificate (PEM) the apiserver presents to admission webhooks that
        ask for one (with ``webhook_client_certificate``, the default); signed by
        :attr:`ca_file`, common name ``kube-apiserver-webhook-client``."""
        return self._started()[1].webhook_client_cert

    @property
    def webhook_client_key_file(self) -> Path:
        """Private key of :attr:`webhook_client_cert_file`."""
        return self._started()[1].webhook_client_key

    @property
    def admin_token(self) -> str:
        """Bearer token of :data:`ADMIN_USER` (group ``system:masters``)."""
        self._started()
        return self._tokens[ADMIN_USER]

    @property
    def tokens(self) -> Mapping[str, str]:
        """Bearer token per user name: :data:`ADMIN_USER`, :data:`NOBODY_USER`,
        :data:`LIMITED_USER`, :data:`MONITORING_USER` (group ``system:monitoring``)."""
        self._started()
        return dict(self._tokens)

    @property
    def kubeconfig_path(self) -> Path:
        """A kubeconfig with contexts ``kubemoon-admin`` (token, current),
        ``kubemoon-admin-cert`` (client certificate), ``nobody`` and ``limited``."""
        return self._started()[0] / "kubeconfig"

    @property
    def apiserver_log(self) -> Path:
        """The kube-apiserver log file (restarts append to it)."""
        return self._started()[0] / "kube-apiserver.log"

    @property
    def etcd_log(self) -> Path:
        """The etcd log file."""
        return self._started()[0] / "etcd.log"

    @property
    def controller_manager(self) -> bool:
        """Whether this server runs kube-controller-manager (garbage collector, namespaces)."""
        return self._with_kcm

    @property
    def controller_manager_log(self) -> Path:
        """The kube-controller-manager log file (absent if it does not run)."""
        return self._started()[0] / "kube-controller-manager.log"

    def pids(self) -> dict[str, int]:
        """Process id of each running child: ``etcd``, ``kube-apiserver`` and
        ``kube-controller-manager`` (if it runs)."""
        children = (self._etcd, self._apiserver, self._kcm)
        return {c.name: c.proc.pid for c in children if c is not None and c.exited() is None}

    # -- a minimal stdlib client -----------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        user: str | None = ADMIN_USER,
        token: str | None = None,
        client_cert: bool = False,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> RawResponse:
        """Send one request with ``http.client`` and read the whole response.

        Authenticates as ``user`` (a key of :attr:`tokens`; ``None`` is anonymous), or
        with ``token`` if given, or with the admin client certificate if
        ``client_cert``. ``body`` is sent as is if ``bytes``, else as JSON. This is the
        fixture's own plumbing, deliberately independent of the KubeMoon adapters.
        """
        self._started()
        context = self._ssl_cert if client_cert else self._ssl
        assert context is not None
        send_headers = {"Accept": "application/json"}
        if token is None and user is not None and not client_cert:
            token = self._tokens[user]
        if token is not None:
            send_headers["Authorization"] = f"Bearer {token}"
        data: bytes | None = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            send_headers["Content-Type"] = "application/json"
        send_headers.update(headers or {})
        return https_request(
            self._port, context, method, path, data=data, headers=send_headers, timeout=timeout
        )

    def _checked(
        self, method: str, path: str, body: object = None, ok: Sequence[int] = (200, 201)
    ) -> dict[str, Any]:
        resp = self.request(method, path, body=body)
        if resp.status not in ok:
            raise ApiServerError(
                f"{method} {path} -> {resp.status} {resp.reason}: {resp.body[:500]!r}"
            )
        result: dict[str, Any] = resp.json()
        return result

    # -- test helpers ----------------------------------------------------------------------

    @property
    def crds(self) -> tuple[str, ...]:
        """Names of the CRDs installed by :meth:`start` (the ``crds`` argument)."""
        return self._crd_names

    def install_crds(self, crds: Sequence[CrdSource], *, timeout: float = 30.0) -> list[str]:
        """Create the CRDs (files, manifests or declared classes, as the ``crds`` argument
        takes) and return their names once each is ``Established`` and served.

        Raises :class:`CrdInstallError` naming the CRD if one is malformed, refused by the
        apiserver, or not established within ``timeout`` seconds. The garbage collector
        of a running controller manager learns a new kind only at its next discovery
        resync; pass ``crds=`` to the constructor to install them before it starts.
        """
        self._started()
        return install_crds(self.request, crds, timeout)

    def create_namespace(self, name: str | None = None, *, prefix: str = "kubemoon-test") -> str:
        """Create a namespace as admin and return its name (random if not given)."""
        if name is None:
            name = f"{prefix}-{secrets.token_hex(4)}"
        self._checked(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
        return name

    def delete_namespace(self, name: str, *, wait: bool = False, timeout: float = 60.0) -> None:
        """Delete a namespace as admin.

        Without ``wait`` this is best effort and returns at once: the namespace controller
        empties and removes the namespace in the background (without the controller
        manager it stays ``Terminating``). With ``wait`` errors are raised and the call
        returns once the namespace is gone, or raises :class:`ApiServerError` after
        ``timeout`` seconds.
        """
        path = f"/api/v1/namespaces/{name}"
        if not wait:
            with contextlib.suppress(ApiServerError, OSError, http.client.HTTPException):
                self._checked("DELETE", path, ok=(200, 202, 404, 409))
            return
        if not self._with_kcm:
            raise ApiServerError(
                "a namespace is never removed without the controller manager "
                "(this ApiServer has controller_manager=False)"
            )
        self._checked("DELETE", path, ok=(200, 202, 404, 409))
        deadline = time.monotonic() + timeout
        while self.request("GET", path).status != 404:
            if time.monotonic() >= deadline:
                raise ApiServerError(f"namespace {name} still exists after {timeout:.0f} s")
            time.sleep(0.1)

    def grant_namespace_access(
        self,
        namespace: str,
        *,
        user: str = LIMITED_USER,
        verbs: Sequence[str] = ("get", "list", "watch"),
        resources: Sequence[str] = ("configmaps",),
        api_groups: Sequence[str] = ("",),
        timeout: float = 10.0,
    ) -> None:
        """Bind ``user`` to a Role in ``namespace`` and wait until RBAC applies it.

        Creates Role and RoleBinding ``kubemoon-<user>`` with one rule made of
        ``api_groups``, ``resources`` and ``verbs``.
        """
        role = f"kubemoon-{user}"
        base = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
        self._checked(
            "POST",
            f"{base}/roles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": role},
                "rules": [
                    {
                        "apiGroups": list(api_groups),
                        "resources": list(resources),
                        "verbs": list(verbs),
                    }
                ],
            },
        )
        self._checked(
            "POST",
            f"{base}/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                ],
            },
        )
        # The RBAC authorizer reads roles from an informer: ask until it has caught up.
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "resourceAttributes": {
                    "namespace": namespace,
                    "verb": "get" if verbs[0] == "*" else verbs[0],
                    "group": api_groups[0],
                    "resource": resources[0],
                },
            },
        }
        deadline = time.monotonic() + timeout
        while True:
            answer = self._checked(
                "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review
            )
            if answer.get("status", {}).get("allowed"):
                return
            if time.monotonic() >= deadline:
                raise ApiServerError(f"RBAC did not grant {user} access to {namespace}")
            time.sleep(0.05)

    # -- etcd ------------------------------------------------------------------------------

    def _etcd_post(self, path: str, payload: Mapping[str, object]) -> dict[str, Any]:
        self._started()
        return etcd_post(self._etcd_port, path, payload)

    def etcd_revision(self) -> int:
        """etcd's current revision (the newest ``resourceVersion`` of any object)."""
        answer = self._etcd_post("/v3/kv/range", {"key": _b64(b"/kubemoon/testenv")})
        return int(answer["header"]["revision"])

    def compact(self, revision: int | None = None) -> int:
        """Compact etcd up to ``revision`` (default: the current one); return it.

        Afterwards a LIST or WATCH at an older ``resourceVersion`` fails with 410 Expired
        when it reaches etcd, i.e. with ``watch_cache=False`` (or for requests that bypass
        the watch cache).
        """
        if revision is None:
            revision = self.etcd_revision()
        # int64 fields are strings in the gateway's JSON (proto3 JSON mapping).
        self._etcd_post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision
