"""TLS contexts from Kafka's ssl.* properties, PEM only (``ssl.keystore.type=PEM``), TLS 1.2+.

Python's ssl module (OpenSSL) does the TLS. Anything that cannot be honoured raises ConfigError
naming the key, so the broker stops at start instead of serving less than was asked.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from pathlib import Path

from strom.config import ConfigError
from strom.security.listener_config import ListenerConfig

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(lc: ListenerConfig) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols(ctx, lc)
    _load_keystore(ctx, lc, required=True)
    auth = (lc.get("ssl.client.auth") or "none").strip().lower()
    if auth not in _CLIENT_AUTH:
        raise ConfigError(lc.key("ssl.client.auth"), f"'{auth}' is not one of required, requested, none")
    if auth != "none" and not _load_truststore(ctx, lc):
        raise ConfigError(lc.key("ssl.truststore.location"),
                          f"ssl.client.auth={auth} needs the CA certificates that sign client certificates")
    ctx.verify_mode = _CLIENT_AUTH[auth]
    return ctx


def client_context(lc: ListenerConfig) -> ssl.SSLContext:
    """The broker as a client of another broker (replica fetchers): trusts the listener's
    truststore, presents its own certificate, checks host names unless the algorithm is empty."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols(ctx, lc)
    _load_keystore(ctx, lc, required=False)
    if not _load_truststore(ctx, lc):
        ctx.load_default_certs()
    ctx.check_hostname = bool((lc.get("ssl.endpoint.identification.algorithm") or "").strip())
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _protocols(ctx: ssl.SSLContext, lc: ListenerConfig) -> None:
    proto = (lc.get("ssl.protocol") or "TLS").strip()
    if proto not in ("TLS", *_VERSIONS):
        raise ConfigError(lc.key("ssl.protocol"), f"{proto} is not supported: use TLS, TLSv1.2 or TLSv1.3")
    enabled = lc.get_list("ssl.enabled.protocols")
    bad = [p for p in enabled if p not in _VERSIONS]
    if bad or not enabled:
        raise ConfigError(lc.key("ssl.enabled.protocols"),
                          f"{','.join(bad) or 'empty'}: strom accepts TLSv1.2 and TLSv1.3 only")
    versions = sorted(_VERSIONS[p] for p in enabled)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    suites = lc.get_list("ssl.cipher.suites")
    if suites:
        if ssl.TLSVersion.TLSv1_3 in versions:
            # OpenSSL's TLS 1.3 suites cannot be chosen through Python's ssl module.
            raise ConfigError(lc.key("ssl.cipher.suites"),
                              "restricts TLS 1.2 suites only; set ssl.enabled.protocols=TLSv1.2 to use it")
        try:
            ctx.set_ciphers(":".join(suites))
        except ssl.SSLError:
            raise ConfigError(lc.key("ssl.cipher.suites"), "no suite in the list is known to OpenSSL "
                              "(give OpenSSL names, e.g. ECDHE-RSA-AES256-GCM-SHA384)") from None
        known = {c["name"] for c in ctx.get_ciphers()}
        unknown = [s for s in suites if s not in known]
        if unknown:
            raise ConfigError(lc.key("ssl.cipher.suites"), f"unknown to OpenSSL: {','.join(unknown)}")


def _require_pem(lc: ListenerConfig, type_key: str) -> None:
    kind = (lc.get(type_key) or "").strip().upper()
    if kind != "PEM":
        raise ConfigError(lc.key(type_key), f"{kind or 'empty'} is not supported: set {type_key}=PEM "
                          "and give PEM files (convert a JKS/PKCS12 store with keytool and openssl)")


def _load_keystore(ctx: ssl.SSLContext, lc: ListenerConfig, required: bool) -> None:
    location, chain, key = (lc.get("ssl.keystore.location"), lc.get("ssl.keystore.certificate.chain"),
                            lc.get("ssl.keystore.key"))
    password = lc.get("ssl.key.password")
    if not (location or chain or key):
        if required:
            raise ConfigError(lc.key("ssl.keystore.location"),
                              f"listener {lc.listener} uses TLS and needs a certificate and private key")
        return
    _require_pem(lc, "ssl.keystore.type")
    if lc.get("ssl.keystore.password"):
        raise ConfigError(lc.key("ssl.keystore.password"), "is not used with PEM; the key's password is ssl.key.password")
    if location:
        if chain or key:
            raise ConfigError(lc.key("ssl.keystore.location"),
                              "give either a file or ssl.keystore.certificate.chain + ssl.keystore.key, not both")
        _load_chain(ctx, lc, "ssl.keystore.location", _read(lc, "ssl.keystore.location"), password)
        return
    if not (chain and key):
        missing = "ssl.keystore.key" if chain else "ssl.keystore.certificate.chain"
        raise ConfigError(lc.key(missing), "is needed with the other (inline PEM certificate chain and key)")
    _load_chain(ctx, lc, "ssl.keystore.certificate.chain", f"{key.strip()}\n{chain.strip()}\n", password)


def _read(lc: ListenerConfig, name: str) -> str:
    path = Path(lc.get(name) or "")
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(lc.key(name), f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None


def _load_chain(ctx: ssl.SSLContext, lc: ListenerConfig, name: str, pem: str, password: str | None) -> None:
    """Key and chain from PEM text. OpenSSL reads them only from a file, so the text goes to a
    private temporary file that is removed at once."""
    if "PRIVATE KEY-----" not in pem or "CERTIFICATE-----" not in pem:
        raise ConfigError(lc.key(name), "must hold a PEM private key and its certificate chain")
    fd, tmp = tempfile.mkstemp(prefix="strom-key-", suffix=".pem")
    try:
        os.write(fd, pem.encode())
        os.close(fd)
        # A callable, never None: OpenSSL would otherwise ask for the pass phrase on the terminal.
        ctx.load_cert_chain(tmp, password=lambda: (password or "").encode())
    except (ssl.SSLError, OSError) as e:
        reason = getattr(e, "reason", None) or e
        if "ENCRYPTED" in pem:
            raise ConfigError(lc.key("ssl.key.password"), f"cannot decrypt the private key ({reason})") from None
        raise ConfigError(lc.key(name), f"not a usable PEM key and certificate chain ({reason})") from None
    finally:
        os.unlink(tmp)


def _load_truststore(ctx: ssl.SSLContext, lc: ListenerConfig) -> bool:
    location, inline = lc.get("ssl.truststore.location"), lc.get("ssl.truststore.certificates")
    if not (location or inline):
        return False
    _require_pem(lc, "ssl.truststore.type")
    if lc.get("ssl.truststore.password"):
        raise ConfigError(lc.key("ssl.truststore.password"), "is not used with a PEM truststore")
    name = "ssl.truststore.location" if location else "ssl.truststore.certificates"
    text = _read(lc, name) if location else (inline or "")
    try:
        ctx.load_verify_locations(cadata=text)
    except (ssl.SSLError, ValueError) as e:
        raise ConfigError(lc.key(name), f"no PEM CA certificate could be read ({getattr(e, 'reason', e)})") from None
    return True
