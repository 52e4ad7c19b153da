"""A wait that times out says what it waited for, the last state seen and the relevant events."""

from __future__ import annotations

import pytest

from localcluster import waits
from localcluster.kubeapi import KubeAPI
from localcluster.testing import claim, exec_pod

pytestmark = pytest.mark.cluster

NO_SUCH_PROFILE = "device.attributes['gpu.nvidia.com'].profile == '9g.99gb'"


def test_a_timed_out_wait_explains_itself(api: KubeAPI, namespace: str) -> None:
    api.create(claim("c", "mig.nvidia.com", [NO_SUCH_PROFILE]), namespace)
    api.create(exec_pod("p", claim_name="c"), namespace)
    waits.pod_unschedulable(api, namespace, "p")
    waits.wait_for(
        lambda: any("FailedScheduling" in e for e in waits.events_for(api, namespace, "Pod", "p")),
        30,
        "the scheduler's event",
    )

    with pytest.raises(waits.WaitTimeout) as pod_wait:
        waits.pod_ready(api, namespace, "p", timeout=1)
    msg = str(pod_wait.value)
    assert msg.startswith(f"timed out after 1s waiting for pod {namespace}/p to be Running and Ready\n"), msg
    assert f"pod {namespace}/p: phase=Pending node=None" in msg  # the last state seen
    assert '"reason": "Unschedulable"' in msg and "cannot allocate all claims" in msg
    assert "event: Warning FailedScheduling:" in msg  # the relevant events

    with pytest.raises(waits.WaitTimeout) as claim_wait:
        waits.claim_allocated(api, namespace, "c", timeout=1)
    msg = str(claim_wait.value)
    assert msg.startswith(f"timed out after 1s waiting for ResourceClaim {namespace}/c to be allocated\n"), (
        msg
    )
    assert f"claim {namespace}/c: {{}}" in msg  # no allocation, no status
    # The pod that waits for the claim, with the scheduler's reason.
    assert "pod p: phase=Pending node=None scheduled=False" in msg and "cannot allocate all claims" in msg
