"""The token the culler shows the holders' GPU agents.

Either one fixed token (`GPUSESSIONS_AGENT_TOKEN`: the Helm chart gives the culler the token
of its Secret), or the Secret the spawner keeps it in (`--agent-token-secret`, what
`configure_culler` passes by default): read per namespace from the cluster, kept a while,
and read again after an agent refused it (the Secret was replaced).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("gpusessions.culler")

# (namespace, Secret name) -> its token, or None (no such Secret, no right to read it)
ReadSecret = Callable[[str, str], Awaitable[str | None]]


class AgentTokens:
    """The agent token of each namespace, fixed or read from its Secret."""

    def __init__(
        self,
        fixed: str | None = None,
        secret: str | None = None,
        read: ReadSecret | None = None,
        ttl: float = 300.0,
        missing_ttl: float = 30.0,
    ) -> None:
        self.fixed = fixed or None
        self.secret = secret or None
        self.read = read
        self.ttl = ttl
        self.missing_ttl = missing_ttl
        self._known: dict[str, tuple[float, str | None]] = {}

    async def get(self, namespace: str, now: float | None = None) -> str | None:
        if self.fixed or not (self.secret and self.read):
            return self.fixed
        now = time.monotonic() if now is None else now
        known = self._known.get(namespace)
        if known is not None and now < known[0]:
            return known[1]
        token = await self.read(namespace, self.secret)
        if token is None:
            log.warning(
                "cannot read the agent token (Secret %s/%s): the GPU agents there will refuse the culler",
                namespace,
                self.secret,
            )
        self._known[namespace] = (now + (self.ttl if token else self.missing_ttl), token)
        return token

    def refused(self, namespace: str) -> None:
        """An agent answered 401: read the Secret again next time."""
        self._known.pop(namespace, None)
