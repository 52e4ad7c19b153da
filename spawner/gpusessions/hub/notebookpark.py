"""The notebook pod's own kernels and their park (a GPU session whose kernels are not in the
holder, with `park_kernels`): the park settings as the notebook pod gets them, and the pod's
delete with the park's budget as its grace period. A part of GPUSessionSpawner (its settings,
`_gpu_state` and `_creating_pod` are the spawner's)."""

from __future__ import annotations

from typing import Any

from kubespawner import KubeSpawner

from gpusessions.core import kernels as K
from gpusessions.core import notebook_pod as NP


class NotebookParking(KubeSpawner):
    park_kernels: Any
    park_timeout: Any
    park_max_bytes: Any
    park_expiry_days: Any
    _gpu_state: dict[str, Any]
    _creating_pod: bool

    def _parking(self) -> NP.Parking:
        return NP.Parking(
            on=bool(self.park_kernels),
            timeout=int(self.park_timeout),
            max_bytes=int(self.park_max_bytes),
            expiry_days=float(self.park_expiry_days),
        )

    def _notebook_parks(self) -> bool:
        """The notebook pod's own kernels park when it goes (a GPU session whose kernels are
        not in the holder, with `park_kernels`)."""
        return bool(
            self.park_kernels and self._gpu_state.get("claim") and self._gpu_state.get("kernels") != "1"
        )

    async def _make_delete_pod_request(
        self, pod_name: str, delete_options: Any, grace_seconds: int, request_timeout: float
    ) -> Any:
        """KubeSpawner deletes the notebook pod with `delete_grace_period` (1 s): a pod whose
        kernels park gets its park budget instead (a forced stop, `now`, still gets 0)."""
        if grace_seconds != 0 and not self._creating_pod and self._notebook_parks():
            grace_seconds = max(int(grace_seconds or 0), K.park_grace(int(self.park_timeout)))
            delete_options.grace_period_seconds = grace_seconds
        return await super()._make_delete_pod_request(
            pod_name, delete_options, grace_seconds, request_timeout
        )
