"""A real kube-apiserver, etcd and kube-controller-manager on 127.0.0.1, for tests and demos.

Rules of this module:

- Binaries come from ``kubemoon-testenv build`` (``make testenv`` in the KubeMoon
  repository); nothing is downloaded here.
- Only the standard library is imported at module level, so importing ``kubemoon_testing``
  (and loading its pytest plugin) never needs the optional ``cryptography`` package; it is
  imported when a server actually starts, to generate the certificates.
- HTTP to the server uses ``http.client`` and ``ssl`` only: this is a test fixture and must
  not depend on the KubeMoon adapters it helps to test.
- Child processes never outlive the Python process: they run in their own session (so a
  terminal's Ctrl-C reaches only Python, which then stops them in order), an ``atexit`` hook
  stops them, and on Linux ``PR_SET_PDEATHSIG`` kills them if Python itself is killed.
"""

from __future__ import annotations

import atexit
import base64
import concurrent.futures
import contextlib
import ctypes
import datetime
import http.client
import ipaddress
import json
import os
import queue
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from ._versions import DEFAULT_RELEASE, gates_for, selected_version

__all__ = [
    "ADMIN_USER",
    "CONTROLLER_MANAGER_USER",
    "KUBERNETES_VERSION",
    "LIMITED_USER",
    "MONITORING_USER",
    "NOBODY_USER",
    "ApiServer",
    "ApiServerError",
    "CrdInstallError",
    "CrdSource",
    "MissingBinariesError",
    "RawResponse",
    "controller_manager_wanted",
    "default_binary_dir",
]

#: The newest supported Kubernetes release: what ``kubemoon-testenv build`` builds and
#: ``ApiServer`` runs unless a version is chosen (``$KUBEMOON_KUBERNETES_VERSION``, the
#: ``version`` argument, the pytest option ``--kubernetes-version``).
KUBERNETES_VERSION = DEFAULT_RELEASE.version
#: Client certificate CN of the test kube-controller-manager (also in ``system:masters``).
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
#: Token user (and client certificate CN) in group ``system:masters``: bypasses RBAC.
ADMIN_USER = "kubemoon-admin"
# The common name of the client certificate the apiserver presents to webhooks.
_WEBHOOK_CLIENT_USER = "kube-apiserver-webhook-client"
#: Token user with no RBAC grant at all: gets 403 for anything but public endpoints.
NOBODY_USER = "nobody"
#: Token user with no grant until :meth:`ApiServer.grant_namespace_access` binds a Role.
LIMITED_USER = "limited"
# In group system:monitoring: a caller whose W3C traceparent a tracing kube-apiserver adopts.
MONITORING_USER = "kubemoon-monitoring"
_MONITORING_GROUP = "system:monitoring"

_ADMIN_GROUP = "system:masters"
_LOG_TAIL_LINES = 40
#: ``0``/``1`` makes ``ApiServer()`` default to ``controller_manager=False``/``True``.
_CONTROLLER_MANAGER_ENV = "KUBEMOON_TESTENV_CONTROLLER_MANAGER"
#: The controllers the test kube-controller-manager runs: cascading deletion and namespace
#: deletion. Everything else (service-account tokens, pods, nodes, ...) stays off.
_CONTROLLERS = ("garbage-collector-controller", "namespace-controller")
_BUILD_HINT = (
    "run `kubemoon-testenv build --version {version}` (it needs Go >= 1.26 on PATH and "
    "builds them once per machine; `make testenv` does the same in the KubeMoon repository), "
    "or set "
    "KUBEMOON_TESTENV_DIR to the cache directory that has them"
)


class ApiServerError(RuntimeError):
    """The test kube-apiserver or etcd could not be started, reached or driven."""


class MissingBinariesError(ApiServerError):
    """A binary is not built yet (run ``kubemoon-testenv build``; it needs Go)."""


class CrdInstallError(ApiServerError):
    """A CRD given to :class:`ApiServer` could not be read, created or established."""


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


@dataclass(frozen=True, slots=True)
class RawResponse:
    """One HTTP response, read completely (watches end when the server closes them)."""

    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)

    def events(self) -> list[dict[str, Any]]:
        """The body of a watch response: one JSON object per line."""
        return [json.loads(line) for line in self.body.splitlines() if line.strip()]


# --- child processes ----------------------------------------------------------------------


class _Spawner:
    """Starts children from one long-lived daemon thread.

    ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child ends, not the
    process. Forking from a short-lived worker thread (``trio.to_thread``, a thread pool)
    would kill the servers when that thread retires, so every fork happens here.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[
            tuple[
                Callable[[], subprocess.Popen[bytes]],
                concurrent.futures.Future[subprocess.Popen[bytes]],
            ]
        ] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def spawn(self, start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="kubemoon-apiserver-spawner", daemon=True
                )
                self._thread.start()
        future: concurrent.futures.Future[subprocess.Popen[bytes]] = concurrent.futures.Future()
        self._jobs.put((start, future))
        return future.result()

    def _run(self) -> None:
        while True:
            start, future = self._jobs.get()
            try:
                future.set_result(start())
            except BaseException as exc:  # handed to the caller's thread
                future.set_exception(exc)


_SPAWNER = _Spawner()


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGKILL the child when its parent dies."""
    if not sys.platform.startswith("linux"):
        return None
    # Resolved in the parent: the child only makes two plain syscalls before exec.
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGKILL))
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return hook


class _Child:
    """One child process whose output goes to a log file."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        # setpriv sets the death signal and execs the program, so no Python code runs
        # between fork and exec: a preexec_fn makes CPython fork for real, which runs the
        # fork handlers of libraries such as grpcio in the child (they may abort it).
        setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
        hook = None if setpriv else _die_with_parent_hook()
        if setpriv:
            argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]

        def start() -> subprocess.Popen[bytes]:
            # Append: a restarted apiserver keeps the previous run's log above.
            with open(log_path, "ab") as log:
                return subprocess.Popen(
                    list(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    # Without setpriv: forked from the spawner thread, and the hook
                    # only makes syscalls through a function resolved before the fork.
                    preexec_fn=hook,  # noqa: PLW1509
                    close_fds=True,
                )

        self.proc = _SPAWNER.spawn(start)

    def exited(self) -> int | None:
        return self.proc.poll()

    def stop(self, timeout: float) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; always reaps the process."""
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
        self.proc.wait()

    def _signal(self, sig: signal.Signals) -> None:
        # The child leads its own process group: signal the group, in case it forked.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


# --- certificates ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Pki:
    ca_file: Path
    ca_pem: str
    serving_cert: Path
    serving_key: Path
    client_cert: Path
    client_key: Path
    kcm_cert: Path
    kcm_key: Path
    webhook_client_cert: Path
    webhook_client_key: Path
    sa_key: Path


def _generate_pki(directory: Path) -> _Pki:
    """A CA, a serving cert for 127.0.0.1/localhost, an admin client cert, an SA key."""
    # Imported here: cryptography is optional and only needed once a server starts.
    try:
        from cryptography import x509  # noqa: PLC0415
        from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
        from cryptography.hazmat.primitives.asymmetric import ec, rsa  # noqa: PLC0415
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: PLC0415
    except ImportError as exc:  # an optional dependency of kubemoon_testing
        raise ApiServerError(
            "the real-apiserver fixture needs the 'cryptography' package to generate "
            "certificates; install it (pip install cryptography)"
        ) from exc

    now = datetime.datetime.now(datetime.UTC)
    # Backdated an hour so a slightly skewed clock never sees "not yet valid".
    not_before = now - datetime.timedelta(hours=1)
    not_after = now + datetime.timedelta(days=365)

    def name(cn: str, org: str | None = None) -> x509.Name:
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        if org is not None:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
        return x509.Name(attrs)

    def write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
        fmt = (
            serialization.PrivateFormat.TraditionalOpenSSL
            if isinstance(key, rsa.RSAPrivateKey)
            else serialization.PrivateFormat.PKCS8
        )
        path.write_bytes(
            key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())
        )
        path.chmod(0o600)

    # P-256 keys: instant to generate, accepted by Go's TLS and by OpenSSL.
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name("kubemoon-test-ca")
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        sans: list[x509.GeneralName],
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            # Python 3.13's default context (VERIFY_X509_STRICT) insists on the AKI.
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                critical=False,
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return builder.sign(ca_key, hashes.SHA256()), key

    serving, serving_key = leaf(
        name("kube-apiserver"),
        ExtendedKeyUsageOID.SERVER_AUTH,
        [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")],
    )
    # O=system:masters: the client certificate is an admin that bypasses RBAC.
    client, client_key = leaf(name(ADMIN_USER, _ADMIN_GROUP), ExtendedKeyUsageOID.CLIENT_AUTH, [])
    # The controller manager's own identity. system:masters because the garbage collector
    # and the namespace controller must read and delete every resource type, including
    # CRDs a test installs later; a real cluster grants the same reach to their service
    # accounts (roles system:controller:generic-garbage-collector and
    # system:controller:namespace-controller: every verb they need on `*`), and this way
    # the fixture writes no RBAC objects that a test could list or delete.
    kcm, kcm_key = leaf(
        name(CONTROLLER_MANAGER_USER, _ADMIN_GROUP), ExtendedKeyUsageOID.CLIENT_AUTH, []
    )
    # What the apiserver presents when a webhook asks for a client certificate (mutual
    # TLS); no group, so it is nobody in particular should it be used against the apiserver.
    webhook_client, webhook_client_key = leaf(
        name(_WEBHOOK_CLIENT_USER), ExtendedKeyUsageOID.CLIENT_AUTH, []
    )
    # RSA because that is what a real cluster's service-account issuer uses; one key
    # file serves both the signing and the verifying flag.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    pem = serialization.Encoding.PEM
    pki = _Pki(
        ca_file=directory / "ca.crt",
        ca_pem=ca_cert.public_bytes(pem).decode("ascii"),
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        client_cert=directory / "admin.crt",
        client_key=directory / "admin.key",
        kcm_cert=directory / "controller-manager.crt",
        kcm_key=directory / "controller-manager.key",
        webhook_client_cert=directory / "webhook-client.crt",
        webhook_client_key=directory / "webhook-client.key",
        sa_key=directory / "sa.key",
    )
    pki.ca_file.write_text(pki.ca_pem, encoding="ascii")
    pki.serving_cert.write_bytes(serving.public_bytes(pem))
    write_key(pki.serving_key, serving_key)
    pki.client_cert.write_bytes(client.public_bytes(pem))
    write_key(pki.client_key, client_key)
    pki.kcm_cert.write_bytes(kcm.public_bytes(pem))
    write_key(pki.kcm_key, kcm_key)
    pki.webhook_client_cert.write_bytes(webhook_client.public_bytes(pem))
    write_key(pki.webhook_client_key, webhook_client_key)
    write_key(pki.sa_key, sa_key)
    return pki


# --- helpers ----------------------------------------------------------------------------------


def _free_port() -> int:
    """A port that was free a moment ago (startup retries if someone took it since)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _b64(data: bytes) -> str:
    # bytes fields are base64 in etcd's JSON gateway (proto3 JSON mapping).
    return base64.b64encode(data).decode("ascii")


def _yaml_str(value: str) -> str:
    # A JSON string is a valid YAML double-quoted scalar.
    return json.dumps(value)


_WORK_DIR_PREFIX = "kubemoon-apiserver-"
_OWNER_FILE = "owner.pid"


def _remove_orphaned_work_dirs() -> None:
    """Delete work directories left by a process that was SIGKILLed (no atexit ran).

    Its children died with it (PR_SET_PDEATHSIG); only the directory remained.
    """
    for path in Path(tempfile.gettempdir()).glob(_WORK_DIR_PREFIX + "*"):
        try:
            owner = int((path / _OWNER_FILE).read_text(encoding="ascii"))
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (OSError, ValueError):
            pass  # alive but not ours (PermissionError), or not a directory we wrote


class _PortInUse(ApiServerError):
    """A child could not bind its port; start() retries with new ports."""


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
        # token,user,uid,"groups"; only the admin has a group besides system:authenticated.
        rows = [
            f'{self._tokens[ADMIN_USER]},{ADMIN_USER},uid-{ADMIN_USER},"{_ADMIN_GROUP}"',
            f"{self._tokens[NOBODY_USER]},{NOBODY_USER},uid-{NOBODY_USER}",
            f"{self._tokens[LIMITED_USER]},{LIMITED_USER},uid-{LIMITED_USER}",
            f"{self._tokens[MONITORING_USER]},{MONITORING_USER},uid-{MONITORING_USER},"
            f'"{_MONITORING_GROUP}"',
        ]
        tokens_csv = self._work_dir / "tokens.csv"
        tokens_csv.write_text("\n".join(rows) + "\n", encoding="ascii")
        tokens_csv.chmod(0o600)
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
        etcd_url = self.etcd_url
        self._etcd = _Child(
            "etcd",
            [
                str(etcd_bin),
                "--name=kubemoon",
                f"--data-dir={self._work_dir / 'etcd-data'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                # Port 0: a single member never talks to peers, but etcd needs a URL.
                "--listen-peer-urls=http://127.0.0.1:0",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
            self._work_dir / "etcd.log",
        )
        self._wait(deadline, self._etcd, self._etcd_healthy, "etcd to be healthy")
        # One write outside /registry moves a fresh etcd past revision 1 before the
        # apiserver's watch caches make their first LIST. A cache initialized at revision 1
        # would serve a watch from resourceVersion=1 instead of answering 410 Expired, as a
        # real cluster (whose caches never start at revision 1) does.
        self._etcd_post("/v3/kv/put", {"key": _b64(b"/kubemoon/testenv"), "value": _b64(b"1")})
        self._write_kubeconfig()
        self._start_apiserver(apiserver_bin)
        self._wait_apiserver_ready(deadline)

    def _start_apiserver(self, apiserver_bin: Path) -> None:
        assert self._work_dir is not None
        assert self._pki is not None
        args = [
            str(apiserver_bin),
            f"--etcd-servers={self.etcd_url}",
            # Both addresses: without them the server fails where there is no default route.
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self._port}",
            f"--cert-dir={self._work_dir / 'apiserver-certs'}",
            f"--tls-cert-file={self._pki.serving_cert}",
            f"--tls-private-key-file={self._pki.serving_key}",
            f"--client-ca-file={self._pki.ca_file}",
            f"--token-auth-file={self._work_dir / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer=https://127.0.0.1:{self._port}",
            f"--service-account-signing-key-file={self._pki.sa_key}",
            f"--service-account-key-file={self._pki.sa_key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            # No controller would create the ServiceAccount that admission insists on.
            "--disable-admission-plugins=ServiceAccount",
            # A single apiserver without the endpoints controller.
            "--endpoint-reconciler-type=none",
            # Only tests compact etcd (ApiServer.compact), so 410s happen on purpose.
            "--etcd-compaction-interval=0",
        ]
        if self._webhook_client_certificate:
            args.append(f"--admission-control-config-file={self._write_admission_config()}")
        if not self._watch_cache:
            args.append("--watch-cache=false")
        if self._min_request_timeout is not None:
            args.append(f"--min-request-timeout={self._min_request_timeout}")
        if self._tracing_endpoint is not None:
            args.append(f"--tracing-config-file={self._write_tracing_config()}")
        if self._feature_gates:
            gates = ",".join(
                f"{k}={str(v).lower()}" for k, v in sorted(self._feature_gates.items())
            )
            args.append(f"--feature-gates={gates}")
        args.extend(self._extra_args)
        self._apiserver = _Child("kube-apiserver", args, self._work_dir / "kube-apiserver.log")

    def _write_tracing_config(self) -> Path:
        assert self._work_dir is not None
        lines = [
            "apiVersion: apiserver.config.k8s.io/v1",
            "kind: TracingConfiguration",
            f"endpoint: {_yaml_str(str(self._tracing_endpoint))}",
        ]
        if self._tracing_rate is not None:
            lines.append(f"samplingRatePerMillion: {int(self._tracing_rate)}")
        path = self._work_dir / "tracing.yaml"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    def _write_admission_config(self) -> Path:
        """The AdmissionConfiguration giving admission webhooks a client certificate."""
        assert self._work_dir is not None
        assert self._pki is not None
        kubeconfig = self._work_dir / "webhook-client.kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\n"
            "kind: Config\n"
            "users:\n"
            '- name: "*"\n'
            "  user:\n"
            f"    client-certificate: {_yaml_str(str(self._pki.webhook_client_cert))}\n"
            f"    client-key: {_yaml_str(str(self._pki.webhook_client_key))}\n",
            encoding="utf-8",
        )
        plugin = (
            "  configuration:\n"
            "    apiVersion: apiserver.config.k8s.io/v1\n"
            "    kind: WebhookAdmissionConfiguration\n"
            f"    kubeConfigFile: {_yaml_str(str(kubeconfig))}\n"
        )
        config = self._work_dir / "admission-config.yaml"
        config.write_text(
            "apiVersion: apiserver.config.k8s.io/v1\n"
            "kind: AdmissionConfiguration\n"
            "plugins:\n"
            f"- name: ValidatingAdmissionWebhook\n{plugin}"
            f"- name: MutatingAdmissionWebhook\n{plugin}",
            encoding="utf-8",
        )
        return config

    def _start_controller_manager(self) -> None:
        assert self._work_dir is not None
        assert self._pki is not None
        kubeconfig = self._work_dir / "controller-manager.kubeconfig"
        q = _yaml_str
        kubeconfig.write_text(
            "\n".join(
                [
                    "apiVersion: v1",
                    "kind: Config",
                    "clusters:",
                    "- name: kubemoon",
                    "  cluster:",
                    f"    server: {q(self.url)}",
                    f"    certificate-authority: {q(str(self._pki.ca_file))}",
                    "users:",
                    "- name: controller-manager",
                    "  user:",
                    f"    client-certificate: {q(str(self._pki.kcm_cert))}",
                    f"    client-key: {q(str(self._pki.kcm_key))}",
                    "contexts:",
                    "- name: controller-manager",
                    "  context: {cluster: kubemoon, user: controller-manager}",
                    "current-context: controller-manager",
                    "",
                ]
            ),
            encoding="utf-8",
        )
        kubeconfig.chmod(0o600)
        args = [
            str(self._binary_dir / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--controllers={','.join(_CONTROLLERS)}",
            # One instance per apiserver: no Lease to wait for or to write.
            "--leader-elect=false",
            # No HTTPS endpoint at all (nothing listens; the probe below checks readiness).
            "--secure-port=0",
            # Deleting a namespace lists and empties every resource type: the default
            # client rate limit (20 qps) would make each deletion take seconds.
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            *self._kcm_args,
        ]
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
        conn = http.client.HTTPConnection("127.0.0.1", self._etcd_port, timeout=2.0)
        try:
            conn.request("GET", "/health")
            resp = conn.getresponse()
            return resp.status == 200 and json.loads(resp.read()).get("health") == "true"
        finally:
            conn.close()

    def _apiserver_ready(self) -> bool:
        resp = self.request("GET", "/readyz", user=None, timeout=2.0)
        return resp.status == 200 and resp.body.strip() == b"ok"

    def _default_namespace_exists(self) -> bool:
        return self.request("GET", "/api/v1/namespaces/default", timeout=2.0).status == 200

    def _write_kubeconfig(self) -> None:
        assert self._work_dir is not None
        assert self._pki is not None
        q = _yaml_str
        lines = [
            "apiVersion: v1",
            "kind: Config",
            "clusters:",
            "- name: kubemoon",
            "  cluster:",
            f"    server: {q(self.url)}",
            f"    certificate-authority: {q(str(self._pki.ca_file))}",
            "users:",
            f"- name: {q(ADMIN_USER)}",
            "  user:",
            f"    token: {q(self._tokens[ADMIN_USER])}",
            f"- name: {q(ADMIN_USER + '-cert')}",
            "  user:",
            f"    client-certificate: {q(str(self._pki.client_cert))}",
            f"    client-key: {q(str(self._pki.client_key))}",
        ]
        for user in (NOBODY_USER, LIMITED_USER):
            lines += [f"- name: {q(user)}", "  user:", f"    token: {q(self._tokens[user])}"]
        lines.append("contexts:")
        for user in (ADMIN_USER, ADMIN_USER + "-cert", NOBODY_USER, LIMITED_USER):
            lines += [
                f"- name: {q(user)}",
                "  context:",
                "    cluster: kubemoon",
                f"    user: {q(user)}",
                "    namespace: default",
            ]
        lines.append(f"current-context: {q(ADMIN_USER)}")
        path = self._work_dir / "kubeconfig"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        path.chmod(0o600)

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
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self._port, context=context, timeout=timeout
        )
        try:
            conn.request(method, path, body=data, headers=send_headers)
            resp = conn.getresponse()
            payload = resp.read()
            return RawResponse(
                status=resp.status,
                reason=resp.reason,
                headers={k.lower(): v for k, v in resp.getheaders()},
                body=payload,
            )
        finally:
            conn.close()

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
        manifests = [m for source in crds for m in _crd_manifests(source)]
        names: list[str] = []
        for manifest in manifests:
            name = str(manifest.get("metadata", {}).get("name", ""))
            resp = self.request("POST", _CRDS, body=manifest)
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
                self._established(name)
                and (version is None or self.request("GET", served).status == 200)
            ):
                if time.monotonic() >= deadline:
                    raise CrdInstallError(f"CRD {name} not established after {timeout:.0f} s")
                time.sleep(0.05)
        return names

    def _established(self, name: str) -> bool:
        resp = self.request("GET", f"{_CRDS}/{name}")
        if resp.status != 200:
            return False
        conditions = resp.json().get("status", {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

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
        conn = http.client.HTTPConnection("127.0.0.1", self._etcd_port, timeout=10.0)
        try:
            conn.request(
                "POST",
                path,
                body=json.dumps(payload).encode(),
                headers={"Content-Type": "application/json"},
            )
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            answer: dict[str, Any] = json.loads(raw)
        except ValueError:
            answer = {}
        if resp.status != 200:
            message = answer.get("message") or raw[:300].decode("utf-8", "replace")
            raise ApiServerError(f"etcd {path} -> {resp.status}: {message}")
        return answer

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
