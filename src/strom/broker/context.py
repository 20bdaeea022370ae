"""What a handler knows about the request it serves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strom.security.authenticator import SaslAuthenticator

# A handler sets this key in its result for a response no client quota counts (a follower's fetch,
# as Kafka exempts replication); the connection removes it before encoding.
QUOTA_EXEMPT = "_quota_exempt"
# A handler sets this key in its result to the response body it encoded itself (wire's body bytes,
# without size and header); the connection frames it as it is and ignores the result's other fields.
ENCODED_BODY = "_encoded_body"


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
    # Who sent it, as Kafka names principals ("User:alice"): the text of the connection's
    # KafkaPrincipal (security/principal.py); authorization decides on it.
    principal: str = "User:ANONYMOUS"
    # The connection's SASL state on a SASL listener (SaslHandshake and SaslAuthenticate act on it).
    session: SaslAuthenticator | None = None
    size: int = 0  # the request's frame, bytes (a produce's size counts against its byte-rate quota)
    # The connection's scratch space, kept as long as the connection: what a handler remembers from
    # one request to the next on it (the fetch handler's last idle answer). None outside a connection.
    memo: dict[str, Any] | None = None
