"""A simulated NVML with the pynvml interface the agent uses (local cluster and tests only).

Configured from a JSON file (`configure(path)`):

    {"gpus": [{"uuid": "GPU-...", "name": "NVIDIA H100 80GB HBM3", "arch": "hopper",
               "memory_mib": 81559,
               "mig": [{"uuid": "MIG-...", "profile": "1g.10gb", "memory_mib": 9984, "gi": 1}]}],
     "control": "/path/to/load.json"}

Load per device UUID comes from the optional control file, re-read on every
call so that tests and demos change it while the agent runs:

    {"MIG-...": {"activity": 80, "processes": 1, "memory_used_mib": 2048},
     "GPU-...": {"pattern": "square", "period": 60, "activity": 90}}

`"pids": {"<pid>": <MiB>}` lists compute processes by pid with their memory (as NVML
reports a CUDA process); `processes` adds anonymous ones.
`pattern` "square" alternates busy (first half of each period) and idle.
Models what real NVML does on these GPUs: utilization is NotSupported on MIG
devices; GPM (per-MIG SM activity) exists on Hopper and newer only, so an A100
MIG device has no activity at all. A config that cannot be read makes every
call fail with NVML_ERROR_LIBRARY_NOT_FOUND, as a node without the driver would.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
_MIG_CAPABLE = ("ampere", "hopper", "blackwell")
_MAX_MIG_DEVICES = 7
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRIC_SM_OCCUPANCY = 3
NVML_GPM_METRICS_GET_VERSION = 1
NVML_GPM_METRIC_MAX = 98

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
}


class NVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(_MESSAGES.get(value, f"error {value}"))
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"error {self.value}")


@dataclass
class _Device:
    uuid: str
    name: str
    arch: str
    memory_mib: int
    is_mig: bool = False
    parent: _Device | None = None
    gi: int = 0
    children: list[_Device] = field(default_factory=list)


@dataclass
class _State:
    devices: dict[str, _Device] = field(default_factory=dict)
    control: Path | None = None
    error: int | None = None
    initialized: bool = False


_state = _State()


def configure(path: str) -> None:
    """Load the simulated GPUs from a JSON config file."""
    global _state
    _state = _State()
    try:
        cfg = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        _state.error = NVML_ERROR_LIBRARY_NOT_FOUND
        return
    for g in cfg.get("gpus", []):
        gpu = _Device(
            g["uuid"], g.get("name", "NVIDIA GPU"), g.get("arch", "hopper"), int(g.get("memory_mib", 0))
        )
        _state.devices[gpu.uuid] = gpu
        for m in g.get("mig", []):
            mig = _Device(
                m["uuid"],
                f"{gpu.name} MIG {m.get('profile', '')}",
                gpu.arch,
                int(m.get("memory_mib", 0)),
                True,
                gpu,
                int(m.get("gi", 0)),
            )
            gpu.children.append(mig)
            _state.devices[mig.uuid] = mig
    if cfg.get("control"):
        _state.control = Path(cfg["control"])


def _check() -> None:
    if _state.error is not None:
        raise NVMLError(_state.error)
    if not _state.initialized:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def _load(dev: _Device) -> dict[str, Any]:
    if _state.control is None:
        return {}
    try:
        data = json.loads(_state.control.read_text())
    except (OSError, ValueError):
        return {}
    entry = data.get(dev.uuid, {})
    return entry if isinstance(entry, dict) else {}


def _activity(dev: _Device, now: float | None = None) -> float:
    load = _load(dev)
    act = float(load.get("activity", 0))
    if load.get("pattern") == "square":
        period = float(load.get("period", 60)) or 60.0
        t = (now if now is not None else time.time()) % period
        return act if t < period / 2 else 0.0
    return act


# -- the pynvml functions the agent calls -------------------------------------------
def nvmlInit() -> None:
    if _state.error is not None:
        raise NVMLError(_state.error)
    _state.initialized = True


def nvmlShutdown() -> None:
    _state.initialized = False


def nvmlDeviceGetHandleByUUID(uuid: str | bytes) -> _Device:
    _check()
    key = uuid.decode() if isinstance(uuid, bytes) else uuid
    if key not in _state.devices:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return _state.devices[key]


def nvmlDeviceGetCount() -> int:
    """The GPUs this NVML sees (in a container: the ones its devices were injected for)."""
    _check()
    return len(_gpus())


def nvmlDeviceGetHandleByIndex(index: int) -> _Device:
    _check()
    gpus = _gpus()
    if not 0 <= index < len(gpus):
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return gpus[index]


def nvmlDeviceGetUUID(h: _Device) -> str:
    _check()
    return h.uuid


def nvmlDeviceGetMigMode(h: _Device) -> list[int]:
    """[current, pending]: enabled when the GPU has MIG devices; NotSupported before Ampere."""
    _check()
    if h.is_mig or h.arch not in _MIG_CAPABLE:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    mode = NVML_DEVICE_MIG_ENABLE if h.children else NVML_DEVICE_MIG_DISABLE
    return [mode, mode]


def nvmlDeviceGetMaxMigDeviceCount(h: _Device) -> int:
    _check()
    return _MAX_MIG_DEVICES if h.arch in _MIG_CAPABLE and not h.is_mig else 0


def nvmlDeviceGetMigDeviceHandleByIndex(h: _Device, index: int) -> _Device:
    """The index-th MIG device of a GPU; NotFound for an empty slot (as real NVML)."""
    _check()
    if not 0 <= index < len(h.children):
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return h.children[index]


def _gpus() -> list[_Device]:
    return [d for d in _state.devices.values() if not d.is_mig]


def nvmlDeviceIsMigDeviceHandle(h: _Device) -> int:
    return 1 if h.is_mig else 0


def nvmlDeviceGetName(h: _Device) -> str:
    return h.name


@dataclass
class _Memory:
    total: int
    used: int
    free: int


def nvmlDeviceGetMemoryInfo(h: _Device, version: Any = None) -> _Memory:
    _check()
    total = h.memory_mib * 2**20
    used = min(int(float(_load(h).get("memory_used_mib", 0)) * 2**20), total)
    return _Memory(total, used, total - used)


@dataclass
class _Process:
    pid: int
    usedGpuMemory: int


def nvmlDeviceGetComputeRunningProcesses(h: _Device) -> list[_Process]:
    _check()
    load = _load(h)
    named = [_Process(int(pid), int(float(mib) * 2**20)) for pid, mib in (load.get("pids") or {}).items()]
    n = int(load.get("processes", 0))
    return named + [_Process(1000 + i, 0) for i in range(n)]


@dataclass
class _Utilization:
    gpu: float
    memory: float


def nvmlDeviceGetUtilizationRates(h: _Device) -> _Utilization:
    _check()
    if h.is_mig:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return _Utilization(_activity(h), 0.0)


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h: _Device) -> _Device:
    _check()
    if not h.is_mig or h.parent is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return h.parent


def nvmlDeviceGetGpuInstanceId(h: _Device) -> int:
    if not h.is_mig:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return h.gi


@dataclass
class _GpmSupport:
    isSupportedDevice: int


def nvmlGpmQueryDeviceSupport(h: _Device) -> _GpmSupport:
    _check()
    return _GpmSupport(1 if h.arch in ("hopper", "blackwell") else 0)


@dataclass
class _GpmSample:
    device: _Device | None = None
    at: float = 0.0
    activity: float = 0.0


def nvmlGpmSampleAlloc() -> _GpmSample:
    return _GpmSample()


def nvmlGpmSampleFree(sample: _GpmSample) -> None:
    return None


def nvmlGpmMigSampleGet(parent: _Device, gi: int, sample: _GpmSample) -> _GpmSample:
    _check()
    if parent.arch not in ("hopper", "blackwell"):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    mig = next((c for c in parent.children if c.gi == gi), None)
    if mig is None:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    sample.device, sample.at, sample.activity = mig, time.time(), _activity(mig)
    return sample


@dataclass
class _Metric:
    metricId: int = 0
    nvmlReturn: int = 0
    value: float = 0.0


class c_nvmlGpmMetricsGet_t:
    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1 = _GpmSample()
        self.sample2 = _GpmSample()
        self.metrics = [_Metric() for _ in range(NVML_GPM_METRIC_MAX)]


def nvmlGpmMetricsGet(mg: c_nvmlGpmMetricsGet_t) -> c_nvmlGpmMetricsGet_t:
    _check()
    for m in mg.metrics[: mg.numMetrics]:
        if m.metricId in (NVML_GPM_METRIC_SM_UTIL, NVML_GPM_METRIC_SM_OCCUPANCY):
            # The activity over the interval: the later sample's load.
            m.value = mg.sample2.activity
        else:
            m.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
    return mg
