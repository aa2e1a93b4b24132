"""A throw-away certificate authority for TLS tests, made with the ``openssl`` command."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from aiorocket.testing._maven import MissingToolError

__all__ = ["Pki", "make_pki"]


@dataclass(frozen=True)
class Pki:
    """Paths of a CA certificate and of a server certificate it signed (PEM; the server
    key is unencrypted PKCS#8, as netty, hence RocketMQ, reads it)."""

    ca_cert: Path
    server_cert: Path
    server_key: Path

    def server_jvm_props(self, mode: str = "permissive") -> dict[str, str]:
        """System properties of a RocketMQ JVM serving TLS with this certificate
        (``mode``: permissive accepts plain TCP too, enforcing only TLS)."""
        return {
            "tls.server.mode": mode,
            "tls.test.mode.enable": "false",
            "tls.server.certPath": str(self.server_cert),
            "tls.server.keyPath": str(self.server_key),
            "tls.server.need.client.auth": "none",
        }


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise MissingToolError("the openssl command is needed to make test certificates")
    subprocess.run([openssl, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(directory: Path, name: str = "ca", hosts: tuple[str, ...] = ("127.0.0.1",)) -> Pki:
    """A new CA ``<name>.pem`` in ``directory`` and a server certificate for ``hosts``
    (IP addresses or DNS names) signed by it, valid for two days."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = f"{name}.key", f"{name}.pem"
    key, csr, cert = f"{name}-server.key", f"{name}-server.csr", f"{name}-server.pem"
    # A CA's key usage stated (keyCertSign): Python 3.13's default context verifies with
    # VERIFY_X509_STRICT, which refuses a CA certificate without it.
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca_cert,
             "-days", "2", "-subj", f"/CN=aiorocket test CA {name}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
             "-subj", f"/CN={hosts[0]}", cwd=directory)  # fmt: skip
    san = ",".join(
        f"IP:{h}" if h.replace(".", "").isdigit() or ":" in h else f"DNS:{h}" for h in hosts
    )
    ext = directory / f"{name}-server.ext"
    ext.write_text(
        f"subjectAltName={san}\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
    )
    _openssl("x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key, "-CAcreateserial",
             "-out", cert, "-days", "2", "-extfile", ext.name, cwd=directory)  # fmt: skip
    return Pki(directory / ca_cert, directory / cert, directory / key)
