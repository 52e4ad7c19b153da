"""Reading devices through NVML (pure logic over an NVML module; no I/O of its own).

Per device: memory used and total, compute process count, and activity:
utilization for a whole GPU, GPM SM activity for a MIG device on Hopper and
newer, `None` ("unknown") where NVML says NotSupported (A100 MIG). A device
is busy when its activity reaches the threshold; when activity is unknown,
when it runs a compute process.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any


@dataclass
class Reading:
    uuid: str
    kind: str = "unknown"  # gpu | mig
    name: str = ""
    memory_used: int | None = None
    memory_total: int | None = None
    processes: int | None = None
    process_memory: dict[int, int] = field(default_factory=dict)  # pid -> bytes (when NVML tells)
    activity: float | None = None  # percent
    activity_source: str = "unknown"  # utilization | gpm-sm-activity | unknown
    busy: bool = False
    last_busy: float | None = None  # unix time
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def visible_uuids(value: str | None) -> tuple[list[str], str | None]:
    """UUIDs from NVIDIA_VISIBLE_DEVICES, or (empty, why) when it names none."""
    v = (value or "").strip()
    if not v or v in ("void", "none"):
        return (
            [],
            "NVIDIA_VISIBLE_DEVICES names no device (is the claim listed in the container's resources?)",
        )
    if v == "all":
        return [], "NVIDIA_VISIBLE_DEVICES=all: the agent needs device UUIDs"
    return [u.strip() for u in v.split(",") if u.strip()], None


def _uuid(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def enumerate_devices(nvml: ModuleType) -> list[str]:
    """The UUIDs of the devices this container can use, from NVML itself: each visible GPU, or,
    on a GPU in MIG mode, its MIG devices that NVML lets this container open.

    With the NVIDIA DRA driver's CDI injection a container gets the device nodes of its devices
    and NVIDIA_VISIBLE_DEVICES=void (kubernetes-sigs/dra-driver-nvidia-gpu: the nvcdi wrapper's
    common edits), never their UUIDs; NVML in the container sees only what was injected."""
    out: list[str] = []
    for i in range(int(nvml.nvmlDeviceGetCount())):
        gpu = nvml.nvmlDeviceGetHandleByIndex(i)
        try:
            mig_on = nvml.nvmlDeviceGetMigMode(gpu)[0] == nvml.NVML_DEVICE_MIG_ENABLE
        except nvml.NVMLError as e:
            if not _not_supported(nvml, e):
                raise
            mig_on = False  # a GPU without MIG (before Ampere)
        if not mig_on:
            out.append(_uuid(nvml.nvmlDeviceGetUUID(gpu)))
            continue
        for j in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(gpu))):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, j)
            except nvml.NVMLError:
                continue  # an empty slot, or a MIG device of another container
            out.append(_uuid(nvml.nvmlDeviceGetUUID(mig)))
    return out


def discover(nvml: ModuleType, visible: str | None) -> tuple[list[str], str | None]:
    """The devices to report, and a problem to show when there are none. UUIDs named in
    NVIDIA_VISIBLE_DEVICES (the device plugin's way) are taken as they are; otherwise (unset,
    "void" as CDI injection sets it, "all", indices) NVML enumerates what the container has."""
    uuids, _ = visible_uuids(visible)
    if uuids and all(u.startswith(("GPU-", "MIG-")) for u in uuids):
        return uuids, None
    found = enumerate_devices(nvml)
    if not found:
        return [], "NVML shows no GPU in this container (is the claim listed in the container's resources?)"
    return found, None


def _not_supported(nvml: ModuleType, e: Exception) -> bool:
    return getattr(e, "value", None) == nvml.NVML_ERROR_NOT_SUPPORTED


@dataclass
class Collector:
    nvml: ModuleType
    uuids: list[str]
    busy_threshold: float = 5.0
    _gpm_prev: dict[str, Any] = field(default_factory=dict)
    _last_busy: dict[str, float] = field(default_factory=dict)

    def read(self, now: float | None = None) -> list[Reading]:
        now = time.time() if now is None else now
        out = []
        for uuid in self.uuids:
            r = Reading(uuid=uuid)
            try:
                self._read(uuid, r)
            except self.nvml.NVMLError as e:
                r.error = f"NVML: {e}"
            r.busy = self._is_busy(r)
            if r.busy:
                self._last_busy[uuid] = now
            r.last_busy = self._last_busy.get(uuid)
            out.append(r)
        return out

    def _is_busy(self, r: Reading) -> bool:
        if r.activity is not None:
            return r.activity >= self.busy_threshold
        return bool(r.processes)

    def _read(self, uuid: str, r: Reading) -> None:
        nv = self.nvml
        h = nv.nvmlDeviceGetHandleByUUID(uuid)
        is_mig = bool(nv.nvmlDeviceIsMigDeviceHandle(h))
        r.kind = "mig" if is_mig else "gpu"
        name = nv.nvmlDeviceGetName(h)
        r.name = name.decode() if isinstance(name, bytes) else str(name)
        mem = nv.nvmlDeviceGetMemoryInfo(h)
        r.memory_used, r.memory_total = int(mem.used), int(mem.total)
        procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
        r.processes = len(procs)
        r.process_memory = {
            int(p.pid): int(p.usedGpuMemory)
            for p in procs
            if isinstance(getattr(p, "usedGpuMemory", None), int)
        }
        if not is_mig:
            try:
                r.activity = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
                r.activity_source = "utilization"
            except nv.NVMLError as e:
                if not _not_supported(nv, e):
                    raise
            return
        r.activity = self._gpm_sm_activity(uuid, h)
        if r.activity is not None:
            r.activity_source = "gpm-sm-activity"

    def _gpm_sm_activity(self, uuid: str, mig: Any) -> float | None:
        """SM activity of a MIG device between two GPM samples (Hopper and newer), else None."""
        nv = self.nvml
        try:
            parent = nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
            if not nv.nvmlGpmQueryDeviceSupport(parent).isSupportedDevice:
                return None
            gi = nv.nvmlDeviceGetGpuInstanceId(mig)
            sample = nv.nvmlGpmSampleAlloc()
            nv.nvmlGpmMigSampleGet(parent, gi, sample)
        except nv.NVMLError as e:
            if _not_supported(nv, e):
                return None
            raise
        prev = self._gpm_prev.get(uuid)
        self._gpm_prev[uuid] = sample
        if prev is None:
            return None  # one sample is not a rate yet: the next reading has it
        mg = nv.c_nvmlGpmMetricsGet_t()
        mg.version = nv.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = 1
        mg.sample1 = prev
        mg.sample2 = sample
        mg.metrics[0].metricId = nv.NVML_GPM_METRIC_SM_UTIL
        nv.nvmlGpmMetricsGet(mg)
        nv.nvmlGpmSampleFree(prev)
        return float(mg.metrics[0].value)
