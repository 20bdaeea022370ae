"""Java-client security settings, as people copy them from a Kafka ``client.properties``, turned into
librdkafka's (the client behind the strom commands, ``strom bench`` and the Spark data source):

    sasl.jaas.config=...PlainLoginModule required username="u" password="p";  -> sasl.username, sasl.password
    ssl.truststore.location=ca.pem (ssl.truststore.type=PEM)                  -> ssl.ca.location
    ssl.keystore.location=client.pem (ssl.keystore.type=PEM)                  -> ssl.certificate.location
                                                                                 + ssl.key.location
    ssl.endpoint.identification.algorithm= (empty)                            -> none

librdkafka's own names pass through unchanged and win. What cannot be translated (a JKS store)
raises ValueError naming the property. An unset store type is taken as PEM (librdkafka reads
nothing else, and says so if the file is not PEM).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from strom.security import jaas

if TYPE_CHECKING:
    from strom.security.client import ClientSecurity

_JAVA_ONLY = ("sasl.jaas.config", "ssl.truststore.location", "ssl.truststore.type", "ssl.keystore.location",
              "ssl.keystore.type", "ssl.truststore.password", "ssl.keystore.password")


def librdkafka_properties(props: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in props.items() if k not in _JAVA_ONLY}
    if "sasl.jaas.config" in props:
        try:
            entry = jaas.parse(str(props["sasl.jaas.config"]))
        except jaas.JaasError as e:
            raise ValueError(f"sasl.jaas.config: {e}") from None
        if entry.username is not None:
            out.setdefault("sasl.username", entry.username)
        if entry.password is not None:
            out.setdefault("sasl.password", entry.password)
    for location, kind in (("ssl.truststore.location", "ssl.truststore.type"),
                           ("ssl.keystore.location", "ssl.keystore.type")):
        if location in props and str(props.get(kind, "PEM")).upper() != "PEM":
            raise ValueError(f"{kind}: only PEM files can be used (convert the store with keytool and openssl)")
    if "ssl.truststore.location" in props:
        out.setdefault("ssl.ca.location", props["ssl.truststore.location"])
    if "ssl.keystore.location" in props:
        out.setdefault("ssl.certificate.location", props["ssl.keystore.location"])
        out.setdefault("ssl.key.location", props["ssl.keystore.location"])
    if str(props.get("ssl.endpoint.identification.algorithm", "x")) == "":
        out["ssl.endpoint.identification.algorithm"] = "none"
    return out


def client_security(props: Mapping[str, Any]) -> ClientSecurity:
    """The TLS context and SASL login librdkafka-style properties describe, for strom's own raw
    connections (the CLI's requests no client library has). ValueError names what cannot be used."""
    # Imported here: the broker's TLS and SASL modules are slow to import, and librdkafka_properties
    # (all a Spark source's planner needs) uses none of them.
    from strom.security.client import PLAINTEXT_CLIENT, ClientSecurity
    from strom.security.sasl_server import SUPPORTED_MECHANISMS

    props = librdkafka_properties(props)
    protocol = str(props.get("security.protocol", "PLAINTEXT")).upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise ValueError(f"security.protocol: unknown protocol {protocol}")
    if protocol == "PLAINTEXT":
        return PLAINTEXT_CLIENT
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=props.get("ssl.ca.location"))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if str(props.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
            context.check_hostname = False
        if props.get("ssl.certificate.location"):
            password = props.get("ssl.key.password")
            context.load_cert_chain(props["ssl.certificate.location"], props.get("ssl.key.location"),
                                    password=lambda: str(password or "").encode())
    if not protocol.startswith("SASL_"):
        return ClientSecurity(protocol, context)
    mechanism = str(props.get("sasl.mechanism", "GSSAPI")).upper()
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ValueError(f"sasl.mechanism: {mechanism} is not supported here (use {', '.join(SUPPORTED_MECHANISMS)})")
    user, password = props.get("sasl.username"), props.get("sasl.password")
    if user is None or password is None:
        raise ValueError("sasl.username and sasl.password are needed")
    return ClientSecurity(protocol, context, mechanism, str(user), str(password))
