"""Admission of a new claim into its team's queue: the thin I/O side of `QueuePolicy`.

`QueuePolicy` (core/queues.py) decides from what it is given; this reads what it needs
from the hub's shared watch (the team's claims, the devices a size may get) when a
session is about to create a claim, and hands the decision to the session.
"""

from __future__ import annotations

import logging
from typing import Any

from gpusessions.core.claims import GPURequest
from gpusessions.core.queues import QueuePolicy
from gpusessions.kube.watch import cluster_view

VIEW_WAIT = 5.0  # seconds to wait for the shared watch's first list


class Admission:
    """What a new claim of one server in `queue` is charged, and whether its team may take it."""

    def __init__(
        self,
        policy: QueuePolicy,
        queue: str,
        claim: tuple[str, str],
        log: logging.Logger | logging.LoggerAdapter[Any] | None = None,
        who: str = "",
    ):
        self.policy = policy
        self.queue = queue
        self.claim = claim  # (namespace, name): the claim being made, not counted as the team's
        self.log = log or logging.getLogger("gpusessions")
        self.who = who

    async def admit(self, request: GPURequest) -> dict[str, str]:
        """The new claim's annotations (what it is charged); `Refused` when it would take the
        team past its quota. Without a reliable picture of the cluster nothing is checked:
        the scheduler's own quota is the hard limit."""
        view = cluster_view()
        if not await view.wait_ready(timeout=VIEW_WAIT) or view.errors:
            if self.policy.limit(self.queue) is not None:
                self.log.warning(
                    "%s: no cluster view; the team quota of %s is not checked", self.who, self.queue
                )
            return {}
        inv, _, _, classes = view.derived()
        charged = self.policy.charge(request, inv, classes)
        self.policy.admit(self.queue, request, charged, view.claims.objects.values(), inv, exclude=self.claim)
        return self.policy.claim_annotations(charged)
