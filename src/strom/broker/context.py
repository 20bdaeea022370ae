"""What a handler knows about the request it serves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from strom.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from strom.security.authenticator import SaslAuthenticator


@dataclass(frozen=True, slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    connection_id: int
    # The listener the connection was accepted on: Metadata and FindCoordinator answer with each
    # broker's endpoint on this listener, as Kafka does ("" when unknown: the inter-broker one).
    listener: str = ""
    # Who the connection acts as (authorization will check it), and its SASL state on a SASL listener.
    principal: KafkaPrincipal = ANONYMOUS
    session: SaslAuthenticator | None = None
