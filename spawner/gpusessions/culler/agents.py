"""Reading the holders' GPU agents, every one in every cycle.

At most `concurrency` reads are in flight at once, through one HTTP client of that size (the
culler's own, not tornado's shared one of 10 connections, where queued requests time out
while they wait): a request is made only when a connection is free, so `timeout` counts the
agent's answer, never a queue. A read that fails for a reason that may pass (no connection,
a timeout, a 5xx or 429 answer) is tried again within the cycle with
`jupyterhub.utils.exponential_backoff` for up to `retry_timeout` seconds; the slot is given
back while it waits. What could still not be read says why on the session (`gpu_error`),
and the policy never counts such a GPU as idle (policy.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass, field

from jupyterhub.utils import exponential_backoff
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from gpusessions.core.claims import AGENT_PORT
from gpusessions.culler.agentauth import AgentTokens
from gpusessions.culler.model import Session

log = logging.getLogger("gpusessions.culler")

# Answers of an agent (or the network) that may pass: read again within the cycle.
RETRY_STATUS = frozenset({429, 500, 502, 503, 504, 599})


@dataclass
class AgentReader:
    token: str | None = None  # one token for every agent (when `tokens` is None)
    tokens: AgentTokens | None = None  # the token of each namespace (the spawner's Secret)
    timeout: float = 2.0  # one read: connect and answer
    concurrency: int = 100  # reads in flight at once (and the HTTP client's connections)
    retry_timeout: float = 10.0  # how long a failing read is tried again within the cycle (0: never)
    port: int = AGENT_PORT
    reads: int = 0  # HTTP requests made
    retries: int = 0  # of them, tries after a failed one
    _client: AsyncHTTPClient | None = field(default=None, repr=False)
    _gate: asyncio.Semaphore | None = field(default=None, repr=False)

    def _http(self) -> tuple[AsyncHTTPClient, asyncio.Semaphore]:
        if self._client is None or self._gate is None:
            # Made on first use, on the running loop; sized to the reads in flight.
            self._client = AsyncHTTPClient(force_instance=True, max_clients=self.concurrency)
            self._gate = asyncio.Semaphore(self.concurrency)
        return self._client, self._gate

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = self._gate = None

    async def _once(self, s: Session, fresh: bool) -> bool | None:
        """One read: True (read), False (failed, may pass: try again), None (failed for good)."""
        client, gate = self._http()
        token = await self.tokens.get(s.namespace) if self.tokens else self.token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        req = HTTPRequest(
            f"http://{s.holder_ip}:{self.port}/api/status" + ("?fresh=1" if fresh else ""),
            headers=headers,
            request_timeout=self.timeout,
            connect_timeout=self.timeout,
        )
        async with gate:
            self.reads += 1
            try:
                resp = await client.fetch(req)
                body = json.loads(resp.body)
                if not isinstance(body, dict):
                    raise ValueError("not a JSON object")
            except HTTPClientError as e:
                s.gpu_error = f"agent unreachable: {e}"
                if e.code == 401 and self.tokens:
                    self.tokens.refused(s.namespace)  # the Secret was replaced: read it again
                return False if e.code in RETRY_STATUS else None
            except (OSError, TimeoutError) as e:
                s.gpu_error = f"agent unreachable: {type(e).__name__}: {e}"
                return False
            except ValueError as e:
                s.gpu_error = f"agent answered no reading: {e}"
                return None
        s.gpu_error = None
        s.gpu = body.get("devices") or []
        s.kernels = body.get("kernels")
        s.kernels_error = body.get("kernels_error")
        nvml = body.get("nvml") or {}
        if not nvml.get("ok"):
            s.gpu_error = nvml.get("error") or "NVML not available"
        return True

    async def read(self, s: Session, fresh: bool = False) -> None:
        """Read the session's agent (`fresh`: it reads NVML now, not its last sample), again
        within `retry_timeout` while it fails for a reason that may pass. The answer, or why
        there is none, is on the session (`gpu`, `gpu_error`; `gpu_read` says if it was read)."""
        # What an earlier read left is not this read's answer.
        s.gpu, s.gpu_error, s.kernels, s.kernels_error = [], None, None, None
        if not s.holder_ip:
            s.gpu_error = "its holder pod has no address yet" if s.holder else "no holder pod"
            return
        if await self._once(s, fresh) is not False or self.retry_timeout <= 0:
            return

        async def again() -> bool:
            self.retries += 1
            return await self._once(s, fresh) is not False  # read, or failed for good: stop

        with contextlib.suppress(TimeoutError):  # still failing: the session says why (gpu_error)
            await exponential_backoff(
                again,
                f"the agent of {s.key} did not answer",
                start_wait=0.1,
                max_wait=max(self.timeout, 0.5),
                timeout=self.retry_timeout,
            )
