"""An encrypted private key never makes OpenSSL prompt for a passphrase.

Without a password callback, ``SSLContext.load_cert_chain`` on an encrypted key asks for
a passphrase on the controlling terminal and blocks the calling thread -- the event loop --
until someone types. Such a key can come from a hostile or careless file author (a
kubeconfig's client key, an exec plugin's ``clientKeyData``, the webhook's certificate
directory) or from whoever can write the webhook certificate Secret. Each loader runs here
in a child process whose controlling terminal is a pseudo-terminal nobody types into: it
must fail at once with a typed error, and no prompt may appear.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

pytestmark = pytest.mark.fault

CHILD = r"""
import sys
from pathlib import Path
from kubemoon_core.errors import ConfigError, LocalProtocolError

cert_file, key_file = sys.argv[1], sys.argv[2]
cert, key = Path(cert_file).read_bytes(), Path(key_file).read_bytes()

from kubemoon_io import ServingCertificate
try:
    ServingCertificate().update(cert, key)
except LocalProtocolError as exc:
    print("serving-certificate:", exc, flush=True)

from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_io import ssl_context
for kwargs in (
    {"client_cert_file": cert_file, "client_key_file": key_file},
    {"client_cert_data": cert, "client_key_data": key},
):
    try:
        ssl_context(ClientConfig(server="https://127.0.0.1:6443", **kwargs))
    except ConfigError as exc:
        print("kubeconfig:", exc, flush=True)

import kubemoon_asyncio, kubemoon_sync, kubemoon_trio
from kubemoon_core.webhooks import WebhookApp
for module in (kubemoon_trio, kubemoon_asyncio, kubemoon_sync):
    try:
        module.WebhookServer(WebhookApp(), cert_file=cert_file, key_file=key_file)
    except LocalProtocolError as exc:
        print(module.__name__ + ":", exc, flush=True)
print("finished", flush=True)
"""


def run_on_a_terminal(args: list[str], timeout: float = 60.0) -> str:
    """Run ``args`` with a pseudo-terminal as its controlling terminal; its output."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its stdin, stdout, stderr and /dev/tty
        try:
            os.execv(args[0], args)
        finally:
            os._exit(127)
    output = b""
    give_up = time.monotonic() + timeout
    try:
        while time.monotonic() < give_up:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
            if b"pass phrase" in output.lower():
                break  # blocked on the prompt: nobody will ever type
    finally:
        with_status = os.waitpid(pid, os.WNOHANG)
        if with_status[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    return output.decode(errors="replace")


def test_an_encrypted_key_is_refused_without_a_prompt(tmp_path: Path) -> None:
    cert = trustme.CA().issue_cert("webhook.example")
    cert_file = tmp_path / "tls.crt"
    cert.cert_chain_pems[0].write_to_path(cert_file)
    key = ec.generate_private_key(ec.SECP256R1())
    key_file = tmp_path / "tls.key"
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    output = run_on_a_terminal([sys.executable, str(script), str(cert_file), str(key_file)])
    assert "pass phrase" not in output.lower(), output
    assert "finished" in output, output
    lines = [line for line in output.splitlines() if "encrypted" in line]
    # One typed refusal per loader: the Secret's source, two kubeconfig forms, three servers.
    assert len(lines) == 6, output
    for prefix in ("serving-certificate:", "kubeconfig:", "kubemoon_trio:", "kubemoon_sync:"):
        assert any(line.startswith(prefix) for line in lines), output


def test_the_prompt_would_block_without_the_guard(tmp_path: Path) -> None:
    """The terminal harness sees OpenSSL's prompt when nothing guards against it, so the
    test above can fail."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = trustme.CA().issue_cert("webhook.example")
    cert_file = tmp_path / "tls.crt"
    cert.cert_chain_pems[0].write_to_path(cert_file)
    key_file = tmp_path / "tls.key"
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    code = (
        "import ssl, sys; c = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH); "
        "c.load_cert_chain(sys.argv[1], sys.argv[2])"
    )
    output = run_on_a_terminal([sys.executable, "-c", code, str(cert_file), str(key_file)], 20.0)
    assert "pass phrase" in output.lower(), output
