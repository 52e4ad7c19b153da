"""Ready-made GPU profiles (KubeSpawner `profile_list` entries) for the NVIDIA DRA driver."""

from __future__ import annotations

from typing import Any


def mig_profile(profile: str, description: str, **extra: Any) -> dict[str, Any]:
    """A profile for one MIG device of the given MIG profile (for example '1g.10gb')."""
    return {
        "display_name": f"MIG {profile}",
        "slug": f"mig-{profile.replace('.', '-')}",
        "description": description,
        "kubespawner_override": {
            "gpu_device_class": "mig.nvidia.com",
            "gpu_size": {"attributes": {"profile": profile}},
            **extra,
        },
    }


def whole_gpu_profile(description: str = "A whole GPU.", **extra: Any) -> dict[str, Any]:
    return {
        "display_name": "Whole GPU",
        "slug": "gpu",
        "description": description,
        "kubespawner_override": {"gpu_device_class": "gpu.nvidia.com", **extra},
    }


def cpu_profile() -> dict[str, Any]:
    return {
        "display_name": "CPU only",
        "slug": "cpu",
        "description": "A notebook without a GPU.",
        "default": True,
    }


def default_profiles() -> list[dict[str, Any]]:
    """CPU only, MIG 1g.10gb, MIG 3g.40gb and a whole GPU."""
    return [
        cpu_profile(),
        mig_profile("1g.10gb", "A 1/7 slice of an H100 or A100: 10 GB of GPU memory."),
        mig_profile("3g.40gb", "A 3/7 slice: 40 GB of GPU memory."),
        whole_gpu_profile("A whole H100 or A100 80GB."),
    ]
