"""Differential test: KubeMoon reads random multi-file kubeconfig sets as kubectl v1.37.2 does.

For each seeded set of 1 to 3 files (listed in ``KUBECONFIG``, sometimes with a missing one),
the reference is the kubectl that ``kubemoon-testenv build`` builds from the test
environment's Go module:

- validity: ``kubectl create configmap x --dry-run=client -o name`` loads every file,
  validates the selected context and builds the client (TLS material included) without a
  server; KubeMoon's is ``load_kubeconfig`` plus, for https, the ``ssl.SSLContext``;
- fields: ``kubectl config view --merge --minify --raw -o json`` against the selected
  :class:`~kubemoon_core.kubeconfig.ClientConfig`.

Every difference must be one of ``DELIBERATE`` (validity) or ``FIELD_DELIBERATE`` (the
fields read), each with its reason, listed in docs/kubeconfig.rst; any other fails the test
with the set's files.
"""

from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kubemoon_core.errors import ConfigError
from kubemoon_core.kubeconfig import ClientConfig, merge_kubeconfigs
from kubemoon_io import load_kubeconfig, ssl_context
from kubemoon_testing import default_binary_dir
from kubemoon_testing._certs import _generate

pytestmark = pytest.mark.differential

SETS = 300
SEED = 22

V1, V1BETA1 = "client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"


@dataclass(frozen=True, slots=True)
class Outcome:
    valid: bool
    detail: str
    fields: dict[str, Any] | None


# -- the generator ---------------------------------------------------------------------------


class Menus:
    """Raw YAML snippets for each field, valid and not, as a user (or an attacker) writes."""

    def __init__(self, root: Path) -> None:
        material = _generate(["h"], "differential")
        (root / "ca.crt").write_bytes(material.ca_pem)
        (root / "client.crt").write_bytes(material.cert_pem)
        (root / "client.key").write_bytes(material.key_pem)
        (root / "token").write_text("file-token\n")
        pems = (material.ca_pem, material.cert_pem, material.key_pem)
        ca, cert, key = (base64.b64encode(p).decode() for p in pems)

        def wrapped(text: str) -> str:
            """As `base64` wraps it: a double-quoted YAML string with its line breaks."""
            return '"' + "".join(f"{text[i : i + 76]}\\n" for i in range(0, len(text), 76)) + '"'

        garbage = base64.b64encode(b"not a pem").decode()
        self.root = root
        # Each menu: (what kubectl accepts, what it refuses or what differs); see pick().
        self.server = (
            ["'https://h:6443'", "'http://h:8080'", "'https://h/prefix'", "'https://[::1]:6443'"],
            ["''", "'h:6443'", "'https://h:6443?x=1'", "123", "'https://h:99999'"],
        )
        self.ca_data = ([ca, wrapped(ca)], ["'!!notbase64'", garbage, "n", "'QUJD IA=='"])
        self.ca_file = ([f"'{root}/ca.crt'", "ca.crt"], ["'missing.crt'"])
        self.insecure = (["true", "false", "n", "yes"], ["'yes'"])
        self.proxy = (
            ["'http://p:3128'", "'http://p:3128/x'", "'socks5://p:1080'", "'http://p:3128/?q=1'"],
            ["'ftp://p'", "'http://'", "'http://p:99999'"],
        )
        self.compression = (["true", "off"], ["'yes'"])
        self.token = (["t0k3n", "'n'", "'1:20'", "2001-12-14"], ["12345", "n", "1e3"])
        self.token_file = ([f"'{root}/token'", "token"], ["'missing-token'"])
        self.cert_data = ([(cert, key), (wrapped(cert), wrapped(key))], [(garbage, garbage)])
        self.cert_file = ([("client.crt", "client.key")], [("'missing.crt'", "client.key")])
        self.api_version = ([V1BETA1, V1], ["client.authentication.k8s.io/v1alpha1", "''"])
        self.command = (["kl", "bin/kl", "'bin\\kl'", "'/usr/bin/kl'"], ["''"])
        self.env = (
            ["{name: A, value: x}", "{name: A}", "{name: A, value: 'on'}"],
            ["{name: '', value: x}", "{name: A, value: n}", "{value: x}"],
        )
        self.mode = (["Never", "IfAvailable", "Always"], ["Sometimes", ""])


Menu = tuple[list[Any], list[Any]]
BAD = 0.06


def pick(rng: random.Random, menu: Menu) -> Any:
    """Mostly what kubectl accepts; now and then what it refuses (or reads differently)."""
    good, bad = menu
    return rng.choice(bad if bad and rng.random() < BAD else good)


def _fields(rng: random.Random, menu: dict[str, Menu], rate: float) -> str:
    chosen = [
        f"{name}: {pick(rng, values)}" for name, values in menu.items() if rng.random() < rate
    ]
    return ", ".join(chosen)


def _cluster(rng: random.Random, m: Menus) -> str:
    menu = {
        "server": m.server,
        "certificate-authority-data": m.ca_data,
        "certificate-authority": m.ca_file,
        "insecure-skip-tls-verify": m.insecure,
        "tls-server-name": (["h", "other"], []),
        "proxy-url": m.proxy,
        "disable-compression": m.compression,
    }
    body = _fields(rng, {"server": m.server}, 0.97)
    rest = _fields(rng, {k: v for k, v in menu.items() if k != "server"}, 0.2)
    return "{" + ", ".join(p for p in (body, rest) if p) + "}"


def _exec(rng: random.Random, m: Menus) -> str:
    parts = [f"apiVersion: {pick(rng, m.api_version)}", f"command: {pick(rng, m.command)}"]
    if rng.random() < 0.3:
        parts.append("args: [--a, 'b c']")
    if rng.random() < 0.5:
        parts.append("env: [" + ", ".join(pick(rng, m.env) for _ in range(2)) + "]")
    if rng.random() < 0.8:
        parts.append(f"interactiveMode: {pick(rng, m.mode)}")
    if rng.random() < 0.2:
        parts.append(f"provideClusterInfo: {pick(rng, (['true', 'yes', 'Y'], ['1']))}")
    return "{" + ", ".join(parts) + "}"


def _user(rng: random.Random, m: Menus) -> str:
    parts: list[str] = []
    roll = rng.random
    if roll() < 0.35:
        parts.append(f"token: {pick(rng, m.token)}")
    if roll() < 0.15:
        parts.append(f"tokenFile: {pick(rng, m.token_file)}")
    if roll() < 0.2:
        parts.append("username: me")
    if roll() < 0.15:
        parts.append("password: pw")
    if roll() < 0.25:
        cert, key = pick(rng, m.cert_data)
        parts += [f"client-certificate-data: {cert}"] if roll() < 0.85 else []
        parts += [f"client-key-data: {key}"] if roll() < 0.85 else []
    elif roll() < 0.15:
        cert, key = pick(rng, m.cert_file)
        parts += [f"client-certificate: {cert}"] if roll() < 0.8 else []
        parts += [f"client-key: {key}"] if roll() < 0.8 else []
    if roll() < 0.3:
        parts.append(f"exec: {_exec(rng, m)}")
    if roll() < 0.04:
        parts.append("auth-provider: {name: oidc, config: {idp-issuer-url: 'https://i'}}")
    if roll() < 0.04:
        parts.append("as: someone")
    return "{" + ", ".join(parts) + "}"


NAMES = ["a", "b", "c"]
SECTIONS = (("clusters", "cluster"), ("users", "user"), ("contexts", "context"))


def _plan(rng: random.Random) -> dict[str, list[str]]:
    """The names one file defines in each section (now and then nameless or duplicated)."""
    plan = {}
    for section, _inner in SECTIONS:
        names = rng.sample(NAMES, rng.choice([0, 1, 1, 2]))
        if names and rng.random() < 0.03:
            names[-1] = rng.choice(["''", names[0]])
        plan[section] = names
    return plan


def _file(
    rng: random.Random, m: Menus, plan: dict[str, list[str]], every: dict[str, list[str]]
) -> str:
    if rng.random() < 0.03:
        return rng.choice(["", "# only a comment\n", "apiVersion: v2\nkind: Config\n"])
    lines = ["apiVersion: v1", "kind: Config"]
    for section, inner in SECTIONS:
        if not plan[section]:
            continue
        lines.append(f"{section}:")
        for name in plan[section]:
            if inner == "cluster":
                body = _cluster(rng, m)
            elif inner == "user":
                body = _user(rng, m)
            else:  # references mostly to entries some file of the set defines
                ctx = [f"cluster: {pick(rng, (every['clusters'] or NAMES, NAMES))}"]
                ctx += [f"user: {pick(rng, (every['users'] or NAMES, NAMES))}"]
                ctx = [part for part in ctx if rng.random() < 0.97]
                namespace = pick(rng, (["ns", "team-a"], ["Not_A_Label"]))
                ctx += [f"namespace: {namespace}"] if rng.random() < 0.4 else []
                body = "{" + ", ".join(ctx) + "}"
            lines.append(f"- name: {name}")
            lines.append(f"  {inner}: {body}")
    if rng.random() < 0.9:
        lines.append(f"current-context: {pick(rng, (every['contexts'] or NAMES, ['missing']))}")
    return "\n".join(lines) + "\n"


def generate(rng: random.Random, m: Menus, directory: Path) -> list[str]:
    directory.mkdir()
    for name in ("ca.crt", "client.crt", "client.key", "token"):  # for relative references
        (directory / name).symlink_to(m.root / name)
    plans = [_plan(rng) for _ in range(rng.choice([1, 1, 2, 2, 3]))]
    every = {section: sorted({n for p in plans for n in p[section]}) for section, _ in SECTIONS}
    paths = []
    for i, plan in enumerate(plans):
        path = directory / f"config-{i}"
        text = _file(rng, m, plan, every)
        roll = rng.random()
        if roll < 0.04:  # kubectl reads the first YAML document only
            text += rng.choice(["---\n- junk\n", "---\nbroken: [\n", "---\ncurrent-context: b\n"])
        elif roll < 0.07:
            text = "\ufeff" + text  # a byte order mark
        elif roll < 0.10:
            text += "current-context: c\n"  # a duplicate key: the last one wins
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    if rng.random() < 0.1:
        paths.insert(rng.randrange(len(paths) + 1), str(directory / "absent"))
    return paths


# -- the two readers -------------------------------------------------------------------------


PROMPT = "Please enter Username"


def kubectl(binary: Path, paths: list[str], home: Path) -> Outcome:
    env = {
        "KUBECONFIG": os.pathsep.join(paths),
        "HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "GOMAXPROCS": "1",  # many short runs side by side: one OS thread of Go each
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(binary), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    created = run("create", "configmap", "x", "--dry-run=client", "-o", "name")
    # stdout too: it holds the credentials prompt ("Please enter Username: ").
    detail = (created.stdout + created.stderr).strip() if created.returncode else ""
    if created.returncode != 0 and PROMPT not in detail:
        return Outcome(False, detail, None)
    # Valid, or stopped at the prompt after the configuration was read and validated: the
    # fields are compared either way.
    view = run("config", "view", "--merge", "--minify", "--raw", "-o", "json")
    fields = json.loads(view.stdout) if view.returncode == 0 else None
    return Outcome(created.returncode == 0, detail, fields)


def kubemoon(paths: list[str]) -> Outcome:
    try:
        config = load_kubeconfig(env={"KUBECONFIG": os.pathsep.join(paths)})
        if config.scheme == "https":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # insecure-skip-tls-verify warns
                ssl_context(config)
    except ConfigError as exc:
        return Outcome(False, str(exc), None)
    return Outcome(True, "", _kubemoon_fields(config))


def _b64(data: bytes | None) -> str | None:
    return base64.b64encode(data).decode() if data else None


def _kubemoon_fields(config: ClientConfig) -> dict[str, Any]:
    exec_config = config.exec
    return {
        "server": config.server,
        "certificate-authority": config.ca_file,
        "certificate-authority-data": _b64(config.ca_data),
        "insecure-skip-tls-verify": config.insecure_skip_tls_verify or None,
        "tls-server-name": config.tls_server_name,
        "proxy-url": config.proxy_url,
        "token": config.token,
        "tokenFile": config.token_file,
        "username": config.username,
        "password": config.password,
        "client-certificate": config.client_cert_file,
        "client-certificate-data": _b64(config.client_cert_data),
        "client-key": config.client_key_file,
        "client-key-data": _b64(config.client_key_data),
        "exec": None
        if exec_config is None
        else {
            "apiVersion": exec_config.api_version,
            "command": exec_config.command,
            "args": list(exec_config.args) or None,
            "env": [{"name": k, "value": v} for k, v in exec_config.env] or None,
            "interactiveMode": exec_config.interactive_mode,
        },
        "namespace": config.namespace,
    }


def _kubectl_fields(view: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """The selected entries of ``config view``; it shows relative paths as written, so they
    are joined here to ``base``, the directory of the set (kubectl joins them when used)."""
    (context,) = view.get("contexts") or [{"context": {}}]
    ctx = context.get("context") or {}
    clusters = view.get("clusters") or [{"cluster": {}}]
    users = view.get("users") or [{"user": {}}]
    cluster, user = clusters[0].get("cluster") or {}, users[0].get("user") or {}
    exec_config = user.get("exec")
    fields: dict[str, Any] = {
        name: cluster.get(name) or None
        for name in (
            "server",
            "certificate-authority",
            "certificate-authority-data",
            "insecure-skip-tls-verify",
            "tls-server-name",
            "proxy-url",
        )
    }
    for name in ("token", "tokenFile", "username", "password"):
        fields[name] = user.get(name) or None
    for name in ("client-certificate", "client-certificate-data", "client-key", "client-key-data"):
        fields[name] = user.get(name) or None  # as written (see FIELD_DELIBERATE)
    fields["exec"] = (
        None
        if exec_config is None
        else {
            "apiVersion": exec_config.get("apiVersion"),
            "command": exec_config.get("command"),
            "args": exec_config.get("args") or None,
            "env": [{"name": e["name"], "value": e.get("value", "")} for e in exec_config["env"]]
            if exec_config.get("env")
            else None,
            "interactiveMode": exec_config.get("interactiveMode"),
        }
    )
    fields["namespace"] = ctx.get("namespace") or "default"
    for name in ("certificate-authority", "tokenFile", "client-certificate", "client-key"):
        if fields[name] and not os.path.isabs(fields[name]):
            fields[name] = os.path.normpath(base / fields[name])
    command = (fields["exec"] or {}).get("command") or ""
    if "/" in command and not os.path.isabs(command):
        fields["exec"]["command"] = os.path.normpath(base / command)
    return fields


# -- deliberate differences ------------------------------------------------------------------


Selected = tuple[dict[str, Any], dict[str, Any], bool]


def _selected(paths: list[str]) -> Selected | None:
    """The raw cluster and user entries the set selects, when every file loads, and whether
    ``config view --minify`` shows them: it leaves out an entry named "" (kubectl still
    uses it), so then only validity is compared."""
    try:
        merged = merge_kubeconfigs([(p, Path(p).read_text()) for p in paths if Path(p).exists()])
    except ConfigError:
        return None
    ctx = merged.contexts.get(merged.current_context)
    if ctx is None:
        return {}, {}, True
    cluster_name, user_name = (str(ctx.body.get(k) or "") for k in ("cluster", "user"))
    cluster, user = merged.clusters.get(cluster_name), merged.users.get(user_name)
    shown = (cluster is None or cluster_name != "") and (user is None or user_name != "")
    return (dict(cluster.body) if cluster else {}), (dict(user.body) if user else {}), shown


def _server(cluster: Mapping[str, Any]) -> str:
    server = cluster.get("server")
    return server if isinstance(server, str) else ""


# name -> (applies to this difference?, the reason). Documented in docs/kubeconfig.rst.
Deliberate = Callable[[dict[str, Any], dict[str, Any], Outcome, Outcome], bool]
DELIBERATE: dict[str, tuple[Deliberate, str]] = {
    "credentials-prompt": (
        lambda c, u, km, kc: km.valid and PROMPT in kc.detail,
        "kubectl asks on the terminal for a username and password when an https user has no "
        "credential; KubeMoon, a library, connects anonymously",
    ),
    "no-context-fallback": (
        lambda c, u, km, kc: (
            kc.valid
            and not km.valid
            and any(t in km.detail for t in ("no context chosen", "names no cluster", "no server"))
        ),
        "with no usable context kubectl falls back to http://localhost:8080; KubeMoon refuses "
        "rather than send requests to whatever listens there",
    ),
    "dangling-reference": (
        lambda c, u, km, kc: kc.valid and not km.valid and "is not defined" in km.detail,
        "kubectl reads a context's undefined cluster or user as an empty one (then falls back "
        "to http://localhost:8080, or connects anonymously); KubeMoon refuses the typo",
    ),
    "server-without-scheme": (
        lambda c, u, km, kc: kc.valid and not km.valid and "://" not in _server(c) != "",
        "kubectl guesses http or https for a server without a scheme; KubeMoon refuses to guess",
    ),
    "server-with-query": (
        lambda c, u, km, kc: kc.valid and not km.valid and "?" in _server(c),
        "kubectl drops a query from the server URL; KubeMoon refuses it (it is no API path)",
    ),
    "port-out-of-range": (
        lambda c, u, km, kc: kc.valid and not km.valid and "out of range" in km.detail,
        "Go's URL parser accepts a port above 65535 in server or proxy-url (the connection "
        "fails later); KubeMoon refuses the URL when it reads it",
    ),
    "proxy-without-host": (
        lambda c, u, km, kc: kc.valid and not km.valid and "proxy-url has no host" in km.detail,
        "client-go accepts a proxy-url without a host (the connection fails later); KubeMoon "
        "refuses it when it reads it",
    ),
    "unsupported-user-fields": (
        lambda c, u, km, kc: (
            kc.valid
            and not km.valid
            and any(
                u.get(k) for k in ("auth-provider", "as", "as-uid", "as-groups", "as-user-extra")
            )
        ),
        "auth-provider plugins and impersonation are not supported; KubeMoon refuses them "
        "rather than connect as someone else",
    ),
    "http-user": (
        lambda c, u, km, kc: kc.valid and not km.valid and _server(c).startswith("http://"),
        "kubectl ignores the whole user entry for an http:// server (it sends no credential); "
        "KubeMoon sends it (with a warning), so it checks it as for https",
    ),
}


_KEYS = ("client-key", "client-key-data")
_CERTS = ("client-certificate", "client-certificate-data")


def _key_without_cert(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> bool:
    """kubectl shows a key of a user without a certificate; KubeMoon has none; nothing else
    differs."""
    if any(theirs[k] for k in _CERTS) or not any(theirs[k] for k in _KEYS):
        return False
    return dict(ours) == {**theirs, **dict.fromkeys(_KEYS)}


# Differences in the fields read (both accept the set): name -> (applies?, the reason).
# Documented in docs/kubeconfig.rst.
FIELD_DELIBERATE: dict[str, tuple[Callable[[Mapping[str, Any], Mapping[str, Any]], bool], str]] = {
    "key-without-certificate": (
        _key_without_cert,
        "`kubectl config view` shows a client key of a user without a certificate as written, "
        "but kubectl never uses it: client-go's rest config takes the key only together with "
        "a certificate (getUserIdentificationPartialConfig), and its validation opens the key "
        "file only then. KubeMoon's ClientConfig, rest.Config's counterpart, leaves it out "
        "too; the token (or other credential) is used alike",
    ),
}


def _difference(km: Outcome, kc: Outcome, selected: Selected | None, base: Path) -> str | None:
    """None when the two agree, else the name of a deliberate difference or ``"UNEXPECTED"``."""
    agree = km.valid == kc.valid
    shown = selected is None or selected[2]
    in_fields = None
    if km.valid and kc.fields is not None and shown:
        assert km.fields is not None
        theirs = _kubectl_fields(kc.fields, base)
        if km.fields != theirs:
            in_fields = next(
                (n for n, (applies, _) in FIELD_DELIBERATE.items() if applies(km.fields, theirs)),
                "UNEXPECTED",
            )
            if in_fields == "UNEXPECTED":
                return in_fields
    if agree:
        return in_fields
    if selected is not None:
        cluster, user, _shown = selected
        for name, (applies, _reason) in DELIBERATE.items():
            if applies(cluster, user, km, kc):
                return name
    return "UNEXPECTED"


@pytest.fixture(scope="module")
def kubectl_binary() -> Path:
    binary = default_binary_dir() / "kubectl"
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is not built: run `make testenv` (kubemoon-testenv build)")
    return binary


def test_kubeconfig_sets_read_as_kubectl_reads_them(kubectl_binary: Path, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    menus = Menus(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    sets = [generate(rng, menus, tmp_path / f"set-{i}") for i in range(SETS)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        references = list(pool.map(lambda p: kubectl(kubectl_binary, p, home), sets))
    outcomes = [kubemoon(paths) for paths in sets]
    tally: Counter[str] = Counter()
    unexpected = []
    for paths, km, kc in zip(sets, outcomes, references, strict=True):
        base = Path(paths[0]).parent
        kind = _difference(km, kc, _selected(paths), base)
        tally[kind or "same"] += 1
        tally["kubectl accepts"] += kc.valid
        tally["fields compared"] += bool(kind != "UNEXPECTED" and km.valid and kc.fields)
        if kind == "UNEXPECTED":
            files = "\n".join(
                f"--- {p}\n{Path(p).read_text() if Path(p).exists() else '(absent)'}" for p in paths
            )
            unexpected.append(
                f"kubemoon: {km.valid} {km.detail}\nkubectl: {kc.valid} {kc.detail}\n"
                f"fields kubemoon: {km.fields}\nfields kubectl: "
                f"{_kubectl_fields(kc.fields, base) if kc.fields else None}\n{files}"
            )
    print(f"{SETS} sets: {dict(tally)}")
    assert not unexpected, f"{len(unexpected)} unexpected differences:\n\n" + "\n\n".join(
        unexpected[:5]
    )
    # Both outcomes occur often enough for the comparison to mean something.
    assert 0.2 * SETS < tally["kubectl accepts"] < 0.8 * SETS, tally


# A user with a client key and no certificate (issue 31, defect 14b), next to each other
# credential: kubectl and KubeMoon both accept it and use the credential; only
# `kubectl config view` still shows the key ("key-without-certificate").
KEY_WITHOUT_CERT = {
    "token-key-file": "token: t0k3n, client-key: client.key",
    "token-missing-key-file": "token: t0k3n, client-key: 'missing.key'",
    "token-key-data": "token: t0k3n, client-key-data: {key}",
    "token-garbage-key-data": "token: t0k3n, client-key-data: {garbage}",
    "token-file-key-file": "tokenFile: token, client-key: client.key",
    "basic-auth-key-file": "username: me, password: pw, client-key: client.key",
    "exec-key-data": (
        "exec: {{apiVersion: " + V1 + ", command: kl, interactiveMode: Never}}, "
        "client-key-data: {key}"
    ),
}


@pytest.mark.parametrize("case", sorted(KEY_WITHOUT_CERT))
def test_a_client_key_without_a_certificate_is_read_as_kubectl_uses_it(
    kubectl_binary: Path, tmp_path: Path, case: str
) -> None:
    menus = Menus(tmp_path)
    directory = tmp_path / "set"
    directory.mkdir()
    for name in ("ca.crt", "client.crt", "client.key", "token"):
        (directory / name).symlink_to(menus.root / name)
    key = base64.b64encode((tmp_path / "client.key").read_bytes()).decode()
    user = KEY_WITHOUT_CERT[case].format(key=key, garbage=base64.b64encode(b"no pem").decode())
    path = directory / "config"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'https://h:6443', certificate-authority: ca.crt}}]\n"
        f"users: [{{name: u, user: {{{user}}}}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    home = tmp_path / "home"
    home.mkdir()
    reference, ours = kubectl(kubectl_binary, [str(path)], home), kubemoon([str(path)])
    assert (reference.valid, ours.valid) == (True, True), (reference.detail, ours.detail)
    assert reference.fields is not None and ours.fields is not None
    theirs = _kubectl_fields(reference.fields, directory)
    assert any(theirs[k] for k in _KEYS)  # config view shows the key as written ...
    assert all(ours.fields[k] is None for k in (*_KEYS, *_CERTS))  # ... which is never used
    assert _difference(ours, reference, _selected([str(path)]), directory) == (
        "key-without-certificate"
    )
    # The credential next to the key is read alike.
    for name in ("token", "tokenFile", "username", "password", "exec"):
        assert ours.fields[name] == theirs[name], name


# Small documents at the edges of YAML and of kubectl's typed decoding, each loaded (with a
# valid file after it) by kubectl and by KubeMoon. Only YAML_DELIBERATE may differ.
YAML_EDGES = {
    "yaml12": "%YAML 1.2\n---\ncurrent-context: x\n",
    "yaml11": "%YAML 1.1\n---\ncurrent-context: x\n",
    "tagdir": "%TAG !e! tag:example.com,2000:\n---\ncurrent-context: x\n",
    "tab-after-colon": "current-context:\tx\n",
    "tab-indent": "preferences:\n\tcolors: true\n",
    "python-tag": "preferences: !!python/name:os.system x\n",
    "custom-tag": "current-context: !foo x\n",
    "str-tag-num": "users: [{name: u, user: {token: !!str 5}}]\n",
    "int-tag-str": "users: [{name: u, user: {token: !!int 5}}]\n",
    "binary-token": "users: [{name: u, user: {token: !!binary QUJD}}]\n",
    "set": "preferences: {extensions: !!set {a, b}}\n",
    "omap": "preferences: {extensions: !!omap [{a: 1}]}\n",
    "merge": "base: &b {token: t}\nusers: [{name: u, user: {<<: *b}}]\n",
    "merge-list": "b1: &b1 {token: t}\nb2: &b2 {username: x}\nusers: [{name: u, user: {<<: [*b1, *b2]}}]\n",
    "null-key": "~: 1\ncurrent-context: x\n",
    "bool-key": "yes: 1\n",
    "list-key": "? [a]\n: 1\n",
    "map-key": "? {a: 1}\n: 1\n",
    "float-key": "1.5: a\n",
    "nan-unknown": "preferences: {extensions: [{name: e, extension: .nan}]}\n",
    "inf-unknown": "foo: .inf\n",
    "nan-top-unknown": "foo: .nan\n",
    "huge-int-unknown": "foo: 99999999999999999999999999\n",
    "cr-only": "current-context: x\rfoo: 1\r",
    "crlf": "current-context: x\r\nfoo: 1\r\n",
    "nel": "current-context: x\u0085foo: 1\n",
    "unicode-esc": 'current-context: "\\u00e9"\n',
    "surrogate-esc": 'current-context: "\\ud800"\n',
    "nul-esc": 'current-context: "\\0"\n',
    "control-char": "current-context: a\x01b\n",
    "doc-end": "current-context: x\n...\n",
    "anchor-only": "a: &x\n",
    "empty-flow": "{}\n",
    "scalar-doc": "just a string\n",
    "list-doc": "- a\n",
    "null-doc": "null\n",
    "tilde-doc": "~\n",
    "dup-anchor": "a: &x 1\nb: &x 2\nc: *x\n",
    "long-key": "k" * 2000 + ": 1\n",
    "colon-plain": "current-context: a:b\n",
    "hash-plain": "current-context: a#b\n",
    "ctx-int-name": "contexts: [{name: 1, context: {}}]\n",
    "time-name": "contexts: [{name: 2001-12-14t21:59:43.10-05:00, context: {}}]\n",
    "kind-num": "kind: 1\n",
    "clusters-map": "clusters: {a: b}\n",
    "clusters-str": "clusters: ''\n",
    "clusters-empty-str-null": "clusters:\n",
    "entry-str": "clusters: [a]\n",
    "cluster-list": "clusters: [{name: a, cluster: []}]\n",
    "cluster-empty-str": "clusters: [{name: a, cluster: ''}]\n",
    "name-bool": "clusters: [{name: yes, cluster: {}}]\n",
    "ext-anything": "extensions: [{name: e, extension: [1, {a: [b]}]}]\n",
    "ext-str": "extensions: x\n",
    "prefs-list": "preferences: []\n",
    "octal-key-like": "0777: x\n",
    "exec-env-str": "users: [{name: u, user: {exec: {env: [a]}}}]\n",
    "exec-args-map": "users: [{name: u, user: {exec: {args: {a: b}}}}]\n",
    "exec-str": "users: [{name: u, user: {exec: 'x'}}]\n",
    "as-groups-int": "users: [{name: u, user: {as-groups: [1]}}]\n",
    "as-user-extra-list": "users: [{name: u, user: {as-user-extra: {a: [1]}}}]\n",
    "auth-config-int": "users: [{name: u, user: {auth-provider: {name: x, config: {a: 1}}}}]\n",
    "case-key": "Clusters: [{name: a, cluster: {server: 5}}]\n",
    "case-key2": "clusters: [{name: a, Cluster: {server: 5}}]\n",
}
YAML_DELIBERATE = {
    "tab-after-colon": "go-yaml accepts a tab after a colon; PyYAML, KubeMoon's reader, refuses it",
}
_VALID = (
    "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://h:6443'}}]\n"
    "users: [{name: u, user: {username: me}}]\n"
    "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
)


def test_yaml_edge_documents_read_as_kubectl_reads_them(
    kubectl_binary: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    valid = tmp_path / "valid"
    valid.write_text(_VALID)
    (tmp_path / "utf16").write_bytes(_VALID.encode("utf-16"))

    def compare(name: str, path: Path) -> str | None:
        paths = [str(path), str(valid)]
        reference, ours = kubectl(kubectl_binary, paths, home), kubemoon(paths)
        if reference.valid == ours.valid or name in YAML_DELIBERATE:
            return None
        return f"{name}: kubectl {reference.valid} {reference.detail!r}, kubemoon {ours.detail!r}"

    documents = {"utf16": tmp_path / "utf16"}
    for name, text in YAML_EDGES.items():
        documents[name] = tmp_path / f"{name}.yaml"
        documents[name].write_bytes(text.encode("utf-8"))
    with ThreadPoolExecutor(max_workers=4) as pool:
        differences = [d for d in pool.map(compare, documents, documents.values()) if d]
    assert not differences, "\n".join(differences)
