"""A CA bundle that trusts cloudlet's CA *and* the system's (stdlib only: the agent ships alone).

``REQUESTS_CA_BUNDLE`` replaces requests' trust store rather than adding to it, so pointing it at
cloudlet's CA alone breaks every other HTTPS call made in that shell or notebook (pip, a remote
MLflow, a training script's download). The bundle is the system's CAs followed by cloudlet's.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from pathlib import Path

# Where distributions keep their CA bundle, after what OpenSSL itself was built to use.
KNOWN_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",  # Debian, Ubuntu, Alpine
    "/etc/pki/tls/certs/ca-bundle.crt",  # Fedora, RHEL
    "/etc/ssl/ca-bundle.pem",  # openSUSE
    "/etc/ssl/cert.pem",  # macOS, BSDs
)


def system_bundle_path() -> Path | None:
    """The system's CA bundle file, or None when this host has none that can be read."""
    defaults = ssl.get_default_verify_paths()
    candidates = [os.environ.get("SSL_CERT_FILE"), defaults.cafile, defaults.openssl_cafile, *KNOWN_BUNDLES]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.R_OK):
            return Path(candidate)
    return None


def bundle_text(cloudlet_ca_pem: str, system_bundle: Path | None) -> str:
    system = system_bundle.read_text(encoding="utf-8", errors="replace") if system_bundle else ""
    if system and not system.endswith("\n"):
        system += "\n"
    return system + "# cloudlet's CA\n" + cloudlet_ca_pem.strip() + "\n"


def write_bundle(target: Path, cloudlet_ca_pem: str, system_bundle: Path | None = None) -> Path:
    """Write the system's CAs plus cloudlet's to ``target`` atomically (readers never see half a file)."""
    text = bundle_text(cloudlet_ca_pem, system_bundle if system_bundle is not None else system_bundle_path())
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".ca-bundle-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
