"""The client's side of PLAIN and SCRAM (the broker logging in to another broker), sans-IO:
``first()`` is the opening token, ``step(answer)`` the next one, None once the exchange is over."""

from __future__ import annotations

import scramp

from strom.security.sasl_server import PLAIN


class SaslClient:
    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism
        self._user, self._password = username, password
        self._scram = None if mechanism == PLAIN else scramp.ScramClient([mechanism], username, password)
        self._step = 0

    def first(self) -> bytes:
        if self._scram is None:
            return b"\0" + self._user.encode() + b"\0" + self._password.encode()
        return self._scram.get_client_first().encode()

    def step(self, answer: bytes) -> bytes | None:
        """The next token, or None when done. Raises scramp.ScramException if the server's
        answer does not prove it knows the credential."""
        if self._scram is None:
            return None
        self._step += 1
        if self._step == 1:
            self._scram.set_server_first(answer.decode())
            return self._scram.get_client_final().encode()
        self._scram.set_server_final(answer.decode())
        return None
