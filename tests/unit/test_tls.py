"""The server's own CA and certificate (cloudlet/tls.py): made once, keys 0600, names the bind host,
and a client that trusts only the CA completes a handshake with it."""

from __future__ import annotations

import asyncio
import socket
import ssl
import stat
import threading
from pathlib import Path

from cryptography import x509

from cloudlet import tls


def _names(path: Path) -> set[str]:
    cert = x509.load_pem_x509_certificates(path.read_bytes())[0]
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(name.value) for name in san}


def test_made_once_with_private_keys_and_the_bind_host(tmp_path: Path) -> None:
    files = tls.ensure(tmp_path, "127.0.0.1", "inst")
    for key in (files.ca_key, files.key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert _names(files.cert) == {"127.0.0.1", "localhost"}
    ca, cert = files.ca.read_bytes(), files.cert.read_bytes()
    again = tls.ensure(tmp_path, "127.0.0.1", "inst")
    assert again.ca.read_bytes() == ca and again.cert.read_bytes() == cert  # nothing remade
    # Another bind host: a new server certificate from the same CA.
    moved = tls.ensure(tmp_path, "ml.example.test", "inst")
    assert moved.ca.read_bytes() == ca and "ml.example.test" in _names(moved.cert)
    assert "10.1.2.3" in _names(tls.ensure(tmp_path, "10.1.2.3", "inst").cert)


def test_a_client_trusting_the_ca_verifies_the_server(tmp_path: Path) -> None:
    files = tls.ensure(tmp_path, "127.0.0.1", "inst")
    server_context = files.server_context()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with server_context.wrap_socket(conn, server_side=True) as tls_conn:
            tls_conn.sendall(b"ok")

    client = ssl.create_default_context(cafile=str(files.ca))
    client.verify_flags |= ssl.VERIFY_X509_STRICT  # what newer Pythons check by default
    for name in ("localhost", "127.0.0.1"):
        threading.Thread(target=serve, daemon=True).start()
        with (
            socket.create_connection(("127.0.0.1", port)) as raw,
            client.wrap_socket(raw, server_hostname=name) as c,
        ):
            assert c.recv(2) == b"ok"
    listener.close()


def test_names_every_address_it_is_told_and_a_new_one_reissues_under_the_same_ca(tmp_path: Path) -> None:
    files = tls.ensure(tmp_path, ["0.0.0.0", "10.77.8.1", "ml.example.test"], "inst")
    names = _names(files.cert)
    assert {"127.0.0.1", "localhost", "10.77.8.1", "ml.example.test"} <= names
    assert "0.0.0.0" not in names and socket.gethostname() in names  # a wildcard: the machine's names
    ca, cert = files.ca.read_bytes(), files.cert.read_bytes()
    assert tls.ensure(tmp_path, ["10.77.8.1"], "inst").cert.read_bytes() == cert  # all named: kept
    # A location names a new address: a new leaf from the same CA, keeping the names it had (a
    # client that trusts the CA, as agents do, trusts the new leaf too).
    tls.ensure(tmp_path, ["10.9.9.9"], "inst")
    assert files.ca.read_bytes() == ca and files.cert.read_bytes() != cert
    assert {"10.77.8.1", "ml.example.test", "10.9.9.9"} <= _names(files.cert)


def _handshake(port: int, ca: Path, name: str) -> str | None:
    client = ssl.create_default_context(cafile=str(ca))
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            client.wrap_socket(raw, server_hostname=name) as conn,
        ):
            return conn.recv(2).decode()
    except ssl.SSLCertVerificationError as exc:
        return None if "mismatch" in str(exc) else str(exc)


def test_a_running_listener_serves_a_reissued_certificate(tmp_path: Path) -> None:
    files = tls.ensure(tmp_path, "127.0.0.1", "inst")
    context = tls.ReloadingContext(files)
    assert not context.refresh()  # nothing changed

    async def main() -> list[str | None]:
        async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"ok")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context.front)
        port = server.sockets[0].getsockname()[1]
        seen = [await asyncio.to_thread(_handshake, port, files.ca, "10.77.8.1")]
        tls.ensure(tmp_path, ["127.0.0.1", "10.77.8.1"], "inst")
        assert await asyncio.to_thread(context.refresh)
        seen.append(await asyncio.to_thread(_handshake, port, files.ca, "10.77.8.1"))
        seen.append(await asyncio.to_thread(_handshake, port, files.ca, "127.0.0.1"))
        server.close()
        await server.wait_closed()
        return seen

    assert asyncio.run(main()) == [None, "ok", "ok"]  # refused (name mismatch), then accepted
