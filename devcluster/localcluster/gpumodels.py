"""GPU models the simulated driver can publish, with their MIG profiles.

Figures follow what `nvidia-smi mig -lgip` reports on these GPUs (GPU instance
profile ID, memory in MiB, SMs and engines) and the placements NVML lists
(start memory slice and size, 8 memory slices per GPU). They are simulation
inputs: close to real hardware, not a promise about every driver version.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class MigProfile:
    name: str  # e.g. "1g.10gb"
    profile_id: int  # GPU instance profile ID (nvidia-smi mig -lgip "ID")
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    compute_slices: int  # the "Ng" part
    memory_slices: int  # placement size
    placements: tuple[int, ...]  # valid placement starts

    def capacities(self) -> dict[str, int]:
        """Capacity values as the driver names them (memory in bytes)."""
        return {
            "multiprocessors": self.multiprocessors,
            "copyEngines": self.copy_engines,
            "decoders": self.decoders,
            "encoders": self.encoders,
            "jpegEngines": self.jpeg_engines,
            "ofaEngines": self.ofa_engines,
            "memory": self.memory_mib * 1024 * 1024,
        }


@dataclass(frozen=True)
class GPUModel:
    key: str
    product_name: str
    architecture: str
    brand: str
    cuda_compute_capability: str
    memory_mib: int
    memory_slices: int
    compute_slices: int
    mig_profiles: tuple[MigProfile, ...] = field(default_factory=tuple)
    addressing_mode: str = "None"  # NVML's addressing mode: None, HMM or ATS

    def profile(self, name: str) -> MigProfile:
        for p in self.mig_profiles:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.mig_profiles) or "none"
        raise ValueError(f"{self.key} has no MIG profile {name!r} (known: {known})")

    @property
    def largest_profile(self) -> MigProfile:
        return max(self.mig_profiles, key=lambda p: p.memory_slices * 100 + p.compute_slices)

    def max_capacities(self) -> dict[str, int]:
        """Each capacity's largest value over all profiles: what the driver announces as the
        full GPU's capacity (and counters) in dynamic MIG mode."""
        out: dict[str, int] = {}
        for p in self.mig_profiles:
            for k, v in p.capacities().items():
                out[k] = max(out.get(k, 0), v)
        return out

    @property
    def toggles_mig_without_reset(self) -> bool:
        """Hopper and newer switch MIG mode without a GPU reset; Ampere does not."""
        return self.architecture not in ("Ampere",)


_H100_PROFILES = (
    MigProfile("1g.10gb", 19, 9984, 16, 1, 1, 0, 1, 0, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    MigProfile("1g.20gb", 15, 20096, 26, 1, 1, 0, 1, 0, 1, 2, (0, 2, 4, 6)),
    MigProfile("2g.20gb", 14, 20096, 32, 2, 2, 0, 2, 0, 2, 2, (0, 2, 4)),
    MigProfile("3g.40gb", 9, 40448, 60, 3, 3, 0, 3, 0, 3, 4, (0, 4)),
    MigProfile("4g.40gb", 5, 40448, 64, 4, 4, 0, 4, 0, 4, 4, (0,)),
    MigProfile("7g.80gb", 0, 81152, 132, 8, 7, 0, 7, 1, 7, 8, (0,)),
    # "+me": the 1-slice profile with all media engines (at most one per GPU).
    MigProfile("1g.10gb+me", 20, 9984, 16, 1, 7, 0, 7, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
)

_A100_PROFILES = (
    MigProfile("1g.10gb", 19, 9728, 14, 1, 0, 0, 0, 0, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    MigProfile("1g.20gb", 15, 19968, 14, 1, 1, 0, 0, 0, 1, 2, (0, 2, 4, 6)),
    MigProfile("2g.20gb", 14, 19968, 28, 2, 1, 0, 0, 0, 2, 2, (0, 2, 4)),
    MigProfile("3g.40gb", 9, 40192, 42, 3, 2, 0, 0, 0, 3, 4, (0, 4)),
    MigProfile("4g.40gb", 5, 40192, 56, 4, 2, 0, 0, 0, 4, 4, (0,)),
    MigProfile("7g.80gb", 0, 80896, 98, 7, 5, 0, 1, 1, 7, 8, (0,)),
    MigProfile("1g.10gb+me", 20, 9728, 14, 1, 1, 0, 1, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
)

MODELS: dict[str, GPUModel] = {
    "H100-80GB": GPUModel(
        key="H100-80GB",
        product_name="NVIDIA H100 80GB HBM3",
        architecture="Hopper",
        brand="Nvidia",
        cuda_compute_capability="9.0.0",
        memory_mib=81559,
        memory_slices=8,
        compute_slices=7,
        mig_profiles=_H100_PROFILES,
        addressing_mode="HMM",
    ),
    "A100-80GB": GPUModel(
        key="A100-80GB",
        product_name="NVIDIA A100-SXM4-80GB",
        architecture="Ampere",
        brand="Nvidia",
        cuda_compute_capability="8.0.0",
        memory_mib=81920,
        memory_slices=8,
        compute_slices=7,
        mig_profiles=_A100_PROFILES,
    ),
}

DRIVER_VERSION = "580.95.5"
CUDA_DRIVER_VERSION = "13.0.0"
# The DRA driver release whose slices the simulation follows.
DRA_DRIVER_RELEASE = "25.12.0"


def model(key: str) -> GPUModel:
    try:
        return MODELS[key]
    except KeyError:
        raise ValueError(f"unknown GPU model {key!r} (known: {', '.join(sorted(MODELS))})") from None
