"""The GPU panel's pure parts: the claim's culler state, the agent's reading, the agent's URL."""

from __future__ import annotations

import asyncio
from typing import Any

from gpusessions.core import kernels as K
from gpusessions.hub.gpustate import claim_state
from gpusessions.notebook import gpustatus, restore
from gpusessions.notebook.gpustatus import GPUStatus, kernels_from_agent, session_from_env, summary

GIB = 2**30


def _claim(ann: dict[str, str], allocated: bool = True) -> dict[str, Any]:
    status = {"allocation": {"devices": {"results": [{"device": "d"}]}}} if allocated else {}
    return {"metadata": {"name": "gpu-ann", "annotations": ann}, "status": status}


def test_claim_state_reads_the_warning_and_a_keep_in_force() -> None:
    assert claim_state(None) == {"claim": None}
    warned = _claim(
        {
            "gpusessions.io/profile": "mig-1g-10gb",
            "gpusessions.io/warned-at": "100",
            "gpusessions.io/cull-at": "700",
            "gpusessions.io/cull-reason": "idle",
            "gpusessions.io/keep-contended": "300",
        }
    )
    # The warning says what a keep now would give: 1 h (keep_for), or 300 s from the warning
    # while someone waits.
    assert claim_state(warned, now=200, keep_for=3600) == {
        "claim": "gpu-ann",
        "profile": "mig-1g-10gb",
        "allocated": True,
        "kept_until": None,
        "kept_contended_until": None,
        "warning": {"cull_at": 700.0, "reason": "idle", "keep_until": 3800, "keep_contended_until": 400.0},
    }
    answered = _claim(
        {
            "gpusessions.io/keep-until": "4000",
            "gpusessions.io/kept-warning-at": "100",
            "gpusessions.io/keep-contended": "300",
        }
    )
    assert claim_state(answered, now=200)["kept_contended_until"] == 400.0
    kept = _claim({"gpusessions.io/keep-until": "900", "gpusessions.io/warned-at": "100"})
    assert claim_state(kept, now=200)["kept_until"] == 900.0 and claim_state(kept, now=200)["warning"] is None
    # An expired keep is no keep; a bad number is ignored.
    assert claim_state(kept, now=1000)["kept_until"] is None
    assert claim_state(_claim({"gpusessions.io/keep-until": "soon"}), now=0)["kept_until"] is None
    assert claim_state(_claim({}, allocated=False))["allocated"] is False


def test_the_panel_sums_the_devices_and_names_each_kernels_notebook() -> None:
    out = {
        "devices": [
            {"memory_used": 2 * GIB, "memory_total": 10 * GIB, "activity": None},
            {"memory_used": GIB, "memory_total": 10 * GIB, "activity": 40.0},
        ]
    }
    assert summary(out) == {"memory_used": 3 * GIB, "memory_total": 20 * GIB, "utilization": 40.0}
    assert summary({}) == {"memory_used": None, "memory_total": None, "utilization": None}
    status = {"kernels": [{"id": "k1", "name": "python3", "execution_state": "idle", "gpu_memory": GIB}]}
    assert kernels_from_agent(status, {"k1": "train.ipynb"}) == [
        {"id": "k1", "name": "python3", "path": "train.ipynb", "execution_state": "idle", "gpu_memory": GIB}
    ]
    assert kernels_from_agent({"kernels": None}, {}) is None
    env = {"GPUSESSIONS_GPU": "MIG 1g.10gb", "GPUSESSIONS_DEVICES": "n/a,n/b", "GPUSESSIONS_NODE": "n"}
    s = session_from_env(env)
    assert (s["gpu"], s["node"], s["devices"]) == ("MIG 1g.10gb", "n", ["n/a", "n/b"])
    assert session_from_env({})["devices"] == []


def test_the_agent_is_at_the_gateway_host() -> None:
    assert K.agent_url("http://127.1.0.9:8888", 9400) == "http://127.1.0.9:9400"
    assert K.agent_url("http://[fd00::5]:8888", 9400) == "http://[fd00::5]:9400"
    env = {e["name"]: e for e in K.notebook_env("http://10.0.0.4:8888", "sec", 9400)}
    assert env["GPUSESSIONS_AGENT_URL"]["value"] == "http://10.0.0.4:9400"


def test_the_notebook_knows_its_kernels_are_parked_not_ended() -> None:
    """The panel offers "Park my session" only where the holder parks the kernels."""
    parked = {e["name"]: e.get("value") for e in K.notebook_env("http://10.0.0.4:8888", "sec", parks=True)}
    plain = {e["name"] for e in K.notebook_env("http://10.0.0.4:8888", "sec")}
    assert parked[K.PARKS_ENV] == "1" and K.PARKS_ENV not in plain
    assert parked[K.PARK_EXPIRY_ENV] == "30" and K.PARK_EXPIRY_ENV not in plain
    # The notebook side reads the same names (it does not import core).
    assert (gpustatus.PARKS_ENV, restore.EXPIRY_ENV) == (K.PARKS_ENV, K.PARK_EXPIRY_ENV)
    env = {"GPUSESSIONS_CLAIM": "gpu-a", K.PARKS_ENV: "1"}
    out = asyncio.run(GPUStatus(env).read({}))
    assert out["parks"] is True
    assert asyncio.run(GPUStatus({"GPUSESSIONS_CLAIM": "gpu-a"}).read({}))["parks"] is False
