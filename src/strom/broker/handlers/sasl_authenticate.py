"""SaslAuthenticate (36): one SASL token each way. A failure is SASL_AUTHENTICATION_FAILED with a
message that does not say what was wrong, and the connection closes after the answer.
v1+: session_lifetime_ms tells the client when to re-authenticate (connections.max.reauth.ms)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E

if TYPE_CHECKING:
    from strom.broker.context import RequestContext

API_KEY = 36
MIN_VERSION = 0
MAX_VERSION = 2


def handle(broker: Any, ctx: RequestContext, request: Any) -> dict[str, Any]:
    if ctx.session is None:
        return {"error_code": E.illegal_sasl_state, "error_message": "this listener does not use SASL",
                "auth_bytes": b"", "session_lifetime": 0}
    result = ctx.session.authenticate(bytes(request.auth_bytes))
    return {"error_code": result.error_code, "error_message": result.error_message,
            "auth_bytes": result.auth_bytes, "session_lifetime": result.session_lifetime_ms}
