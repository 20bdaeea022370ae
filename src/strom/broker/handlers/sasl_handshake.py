"""SaslHandshake (17): the client names a mechanism; the answer lists the listener's mechanisms.

v0: the tokens that follow travel as bare frames; v1: in SaslAuthenticate requests. The state lives
in the connection's SaslAuthenticator (strom.security); on a listener without SASL the request is
out of place (ILLEGAL_SASL_STATE), as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E

if TYPE_CHECKING:
    from strom.broker.context import RequestContext

API_KEY = 17
MIN_VERSION = 0
MAX_VERSION = 1


def handle(broker: Any, ctx: RequestContext, request: Any) -> dict[str, Any]:
    # Plain function (no Task): the connection acts on the outcome before the next frame.
    if ctx.session is None:
        return {"error_code": E.illegal_sasl_state, "mechanisms": []}
    error, mechanisms = ctx.session.handshake(request.mechanism, ctx.api_version)
    return {"error_code": error, "mechanisms": mechanisms}
