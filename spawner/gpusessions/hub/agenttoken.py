"""The holders' GPU agent token: one Secret per namespace (`agent_token_secret`), made with a
random token when a holder needs it there and it is missing, and kept (the Helm chart makes its
own). It is looked up before each holder is made (one GET; holders are made once a session), not
remembered: a Secret deleted under a running hub (by an admin, a namespace clean-up) is made
again, where a remembered "it exists" gave holders whose agent could not start.

The hub never reads the token: the holder's container takes it from the Secret, and the
culler reads it (`--agent-token-secret`, culler/agentauth.py) or is given it (the chart).
"""

from __future__ import annotations

import logging
from typing import Any

from gpusessions.core.claims import build_agent_token_secret
from gpusessions.kube.api import Conflict

log = logging.getLogger("gpusessions")

async def ensure(api: Any, namespace: str, name: str) -> None:
    """The Secret exists (made here with a random token if it did not)."""
    if await api.get_secret_metadata(namespace, name) is None:
        try:
            await api.create_secret(build_agent_token_secret(name, namespace))
            log.info("Created the GPU agents' token Secret %s/%s", namespace, name)
        except Conflict:
            pass  # made meanwhile (another hub, the culler's start): it is the one to use
