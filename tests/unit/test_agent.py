"""The GPU agent on the simulated NVML: whole GPU, H100 MIG (GPM), A100 MIG (no activity)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.testing import AsyncHTTPTestCase

from gpusessions.agent import fakenvml
from gpusessions.agent.collect import Collector, discover, enumerate_devices, visible_uuids
from gpusessions.agent.server import AgentState, make_app, prometheus
from promtext import value

GPU = "GPU-11111111-1111-1111-1111-111111111111"
H100 = "GPU-22222222-2222-2222-2222-222222222222"
H100_MIG = "MIG-33333333-3333-3333-3333-333333333333"
A100 = "GPU-44444444-4444-4444-4444-444444444444"
A100_MIG = "MIG-55555555-5555-5555-5555-555555555555"


@pytest.fixture
def nvml(tmp_path: Path) -> Any:
    control = tmp_path / "load.json"
    control.write_text("{}")
    cfg = {
        "control": str(control),
        "gpus": [
            {"uuid": GPU, "name": "NVIDIA H100 80GB HBM3", "arch": "hopper", "memory_mib": 81559},
            {
                "uuid": H100,
                "name": "NVIDIA H100 80GB HBM3",
                "arch": "hopper",
                "memory_mib": 81559,
                "mig": [{"uuid": H100_MIG, "profile": "1g.10gb", "memory_mib": 9984, "gi": 7}],
            },
            {
                "uuid": A100,
                "name": "NVIDIA A100-SXM4-80GB",
                "arch": "ampere",
                "memory_mib": 81920,
                "mig": [{"uuid": A100_MIG, "profile": "1g.10gb", "memory_mib": 9728, "gi": 9}],
            },
        ],
    }
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps(cfg))
    fakenvml.configure(str(path))
    fakenvml.nvmlInit()
    fakenvml.control_path = control  # type: ignore[attr-defined]
    return fakenvml


def _load(nvml: Any, loads: dict[str, Any]) -> None:
    nvml.control_path.write_text(json.dumps(loads))


def test_whole_gpu_uses_utilization(nvml: Any) -> None:
    c = Collector(nvml, [GPU], busy_threshold=5)
    [r] = c.read(now=100)
    assert (r.kind, r.activity, r.activity_source, r.busy, r.last_busy) == (
        "gpu",
        0.0,
        "utilization",
        False,
        None,
    )
    assert r.memory_total == 81559 * 2**20
    _load(nvml, {GPU: {"activity": 40, "processes": 2, "memory_used_mib": 1000}})
    [r] = c.read(now=200)
    assert (r.activity, r.busy, r.last_busy, r.processes, r.memory_used) == (40.0, True, 200, 2, 1000 * 2**20)
    _load(nvml, {GPU: {"activity": 3}})
    [r] = c.read(now=300)
    assert not r.busy and r.last_busy == 200, "last busy stays at the last busy sample"


def test_h100_mig_uses_gpm_sm_activity(nvml: Any) -> None:
    c = Collector(nvml, [H100_MIG])
    [r] = c.read()
    assert r.kind == "mig" and r.activity is None, "one GPM sample is not a rate yet"
    _load(nvml, {H100_MIG: {"activity": 75}})
    [r] = c.read()
    assert (r.activity, r.activity_source, r.busy) == (75.0, "gpm-sm-activity", True)
    assert r.memory_total == 9984 * 2**20


def test_a100_mig_activity_is_unknown_and_processes_decide(nvml: Any) -> None:
    c = Collector(nvml, [A100_MIG])
    _load(nvml, {A100_MIG: {"activity": 90}})
    for _ in range(2):
        [r] = c.read()
    assert (r.activity, r.activity_source, r.busy) == (None, "unknown", False)
    _load(nvml, {A100_MIG: {"processes": 1}})
    [r] = c.read()
    assert r.busy and r.processes == 1


def test_square_load_changes_over_time(nvml: Any) -> None:
    _load(nvml, {GPU: {"pattern": "square", "period": 60, "activity": 90}})
    dev = nvml.nvmlDeviceGetHandleByUUID(GPU)
    assert nvml._activity(dev, now=6000) == 90.0
    assert nvml._activity(dev, now=6040) == 0.0


def test_unknown_device_and_missing_nvml_are_reported(nvml: Any, tmp_path: Path) -> None:
    [r] = Collector(nvml, ["GPU-not-here"]).read()
    assert r.error == "NVML: Not Found"
    fakenvml.configure(str(tmp_path / "missing.json"))
    state = AgentState(load_nvml=lambda: fakenvml, visible=GPU, busy_threshold=5)
    state.sample(now=0)
    st = state.status()
    assert st["nvml"] == {"ok": False, "error": "NVML is not available: NVML Shared Library Not Found"}
    assert st["devices"] == []
    assert "gpusessions_nvml_up 0" in prometheus(state)
    state.sample(now=1)  # retried later, never raises


def test_visible_devices_parsing() -> None:
    assert visible_uuids("MIG-a,GPU-b") == (["MIG-a", "GPU-b"], None)
    assert visible_uuids("void")[1] and visible_uuids(None)[1] and visible_uuids("all")[1]


def test_prometheus_text(nvml: Any) -> None:
    _load(nvml, {GPU: {"activity": 50}})
    state = AgentState(load_nvml=lambda: nvml, visible=f"{GPU},{A100_MIG}", busy_threshold=5)
    state.sample(now=10)
    text = prometheus(state)
    assert "gpusessions_nvml_up 1" in text
    gpu = {"uuid": GPU, "kind": "gpu", "source": "utilization"}
    assert value(text, "gpusessions_gpu_activity_percent", **gpu) == 50.0
    mig = {"uuid": A100_MIG, "kind": "mig", "source": "unknown"}
    assert value(text, "gpusessions_gpu_busy", **mig) == 0
    assert value(text, "gpusessions_gpu_activity_percent", **mig) is None, "unknown activity is absent"


class AgentHTTPTest(AsyncHTTPTestCase):
    def get_app(self) -> Any:
        self.state = AgentState(load_nvml=lambda: fakenvml, visible=None, busy_threshold=5)
        return make_app(self.state, token="s3cret")

    def test_token_is_required_except_for_healthz(self) -> None:
        assert self.fetch("/healthz").code == 200
        assert self.fetch("/api/status").code == 401
        assert self.fetch("/metrics", headers={"Authorization": "Bearer wrong"}).code == 401
        r = self.fetch("/api/status", headers={"Authorization": "Bearer s3cret"})
        assert r.code == 200 and json.loads(r.body)["agent"] == "gpusessions"


# -- finding the devices: CDI injection sets NVIDIA_VISIBLE_DEVICES=void, NVML sees what was injected
@pytest.mark.parametrize("visible", [None, "void", "all", "0,1"])
def test_devices_come_from_nvml_when_the_variable_names_no_uuid(nvml: Any, visible: str | None) -> None:
    # The whole GPU (MIG mode off), and of each GPU in MIG mode its MIG devices, not the parent.
    assert discover(nvml, visible) == ([GPU, H100_MIG, A100_MIG], None)


def test_uuids_in_the_variable_are_taken_as_they_are(nvml: Any) -> None:
    assert discover(nvml, f"{A100_MIG},{GPU}") == ([A100_MIG, GPU], None)


def test_a_gpu_without_mig_support_is_reported_whole(tmp_path: Path) -> None:
    t4 = "GPU-66666666-6666-6666-6666-666666666666"
    path = tmp_path / "nvml.json"
    path.write_text(
        json.dumps({"gpus": [{"uuid": t4, "name": "Tesla T4", "arch": "turing", "memory_mib": 15360}]})
    )
    fakenvml.configure(str(path))
    fakenvml.nvmlInit()
    with pytest.raises(fakenvml.NVMLError):
        fakenvml.nvmlDeviceGetMigMode(fakenvml.nvmlDeviceGetHandleByIndex(0))  # NotSupported
    assert enumerate_devices(fakenvml) == [t4]


def test_a_container_without_devices_says_so(tmp_path: Path) -> None:
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps({"gpus": []}))
    fakenvml.configure(str(path))
    state = AgentState(load_nvml=lambda: fakenvml, visible="void", busy_threshold=5)
    state.sample(now=1)
    assert state.readings == []
    assert state.problem is not None and "NVML shows no GPU in this container" in state.problem


def test_the_agent_reads_what_it_enumerated(nvml: Any) -> None:
    _load(nvml, {H100_MIG: {"processes": 1, "memory_used_mib": 512}})
    state = AgentState(load_nvml=lambda: nvml, visible="void", busy_threshold=5)
    state.sample(now=10)
    by_uuid = {r.uuid: r for r in state.readings}
    assert set(by_uuid) == {GPU, H100_MIG, A100_MIG} and state.problem is None
    assert by_uuid[H100_MIG].kind == "mig" and by_uuid[H100_MIG].processes == 1


def test_gpu_check_prints_one_line_per_device(nvml: Any) -> None:
    from gpusessions.agent import gpucheck

    _load(nvml, {GPU: {"activity": 40, "memory_used_mib": 1024}})
    rc, lines = gpucheck.check(nvml, None, 0)
    assert rc == 0 and lines[0].startswith("gpu-check: 3 device(s)")
    by_uuid = {ln.split()[0]: ln for ln in lines[1:]}
    assert "memory 1.0/79.6 GiB" in by_uuid[GPU] and "utilization 40%" in by_uuid[GPU]
    assert "GPM SM activity" in by_uuid[H100_MIG]
    assert "activity unknown (NVML: NotSupported)" in by_uuid[A100_MIG]


def test_gpu_check_without_a_gpu_is_one_line_and_fails(tmp_path: Path) -> None:
    from gpusessions.agent import gpucheck

    fakenvml.configure(str(tmp_path / "missing.json"))  # as NVML on a machine without the driver
    rc, lines = gpucheck.check(fakenvml, None, 0)
    assert rc == 1 and len(lines) == 1 and lines[0].startswith("gpu-check: no NVIDIA GPU here")


class AgentFreshReadTest(AsyncHTTPTestCase):
    """`?fresh=1` (the culler's last look before a cull) reads NVML then, not the last sample."""

    def get_app(self) -> Any:
        return make_app(self.state, token=None)

    def setUp(self) -> None:
        import tempfile

        self.tmp = Path(tempfile.mkdtemp())
        control = self.tmp / "load.json"
        control.write_text("{}")
        cfg = {"control": str(control), "gpus": [{"uuid": GPU, "name": "H100", "arch": "hopper"}]}
        (self.tmp / "nvml.json").write_text(json.dumps(cfg))
        fakenvml.configure(str(self.tmp / "nvml.json"))
        self.load = control
        self.state = AgentState(load_nvml=lambda: fakenvml, visible=GPU, busy_threshold=5)
        self.state.sample()
        super().setUp()

    def test_a_fresh_read_sees_work_begun_after_the_last_sample(self) -> None:
        self.load.write_text(json.dumps({GPU: {"activity": 90, "processes": 1}}))
        stale = json.loads(self.fetch("/api/status").body)["devices"][0]
        assert stale["busy"] is False, "without fresh: the last periodic sample, taken before the work"
        assert self.state.sampled_at is not None
        self.state.sampled_at -= 1  # a sample younger than FRESH_MIN_SECONDS would be served as it is
        now = json.loads(self.fetch("/api/status?fresh=1").body)["devices"][0]
        assert now["busy"] is True and now["activity"] == 90.0


class AgentSessionTokenTest(AsyncHTTPTestCase):
    """The session's own gateway token (its notebook has it) reads this agent too."""

    def get_app(self) -> Any:
        self.state = AgentState(load_nvml=lambda: fakenvml, visible=None, busy_threshold=5)
        return make_app(self.state, token="s3cret", session_token="mine")

    def test_the_culler_token_and_the_session_token_read_it_no_other(self) -> None:
        for tok, code in (("s3cret", 200), ("mine", 200), ("other", 401), ("", 401)):
            assert self.fetch("/api/status", headers={"Authorization": f"token {tok}"}).code == code, tok
