"""request_from: one checked way from a profile's GPU settings to a GPU request, for the
spawner and the picker."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gpusessions.core.claims import Alternative, GPURequest
from gpusessions.core.profiles import mig_profile
from gpusessions.core.requests import InvalidSettings, profile_settings, request_from
from gpusessions.hub import picker

SPAWNER = SimpleNamespace(
    gpu_device_class="", gpu_count=1, gpu_count_max=8, gpu_selectors=[], gpu_first_available=[], gpu_size={}
)


def test_settings_make_the_request() -> None:
    assert request_from({}) == GPURequest()
    r = request_from(
        {"gpu_device_class": "mig.nvidia.com", "gpu_size": {"attributes": {"profile": "1g.10gb"}}}
    )
    assert r.device_class == "mig.nvidia.com" and r.describe() == "MIG 1g.10gb"
    first = request_from(
        {
            "gpu_device_class": "ignored.example.com",
            "gpu_first_available": [
                {"device_class": "a"},
                {"device_class": "b", "count": 2, "selectors": ["x"]},
            ],
        }
    )
    assert first.device_class == "" and first.first_available == (
        Alternative("a"),
        Alternative("b", 2, ("x",)),
    )


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"gpu_count": 9}, "gpu_count must be a whole number from 1 to 8, not 9"),
        ({"gpu_count": 0}, "gpu_count must be a whole number from 1 to 8"),
        ({"gpu_count": True}, "gpu_count must be a whole number"),
        ({"gpu_count": "2"}, "gpu_count must be a whole number"),
        ({"gpu_count": 3, "gpu_count_max": 2}, "from 1 to 2"),
        ({"gpu_device_class": 7}, "gpu_device_class must be a string"),
        ({"gpu_selectors": "device.driver == 'x'"}, "gpu_selectors must be a list of CEL strings"),
        ({"gpu_size": {"colour": "red"}}, "gpu_size accepts attributes"),
        ({"gpu_size": "big"}, "gpu_size must be a mapping"),
        ({"gpu_first_available": [{"count": 1}]}, "gpu_first_available[0] needs a device_class"),
        ({"gpu_first_available": [{"device_class": "a", "x": 1}]}, "unknown keys: ['x']"),
        (
            {"gpu_first_available": [{"device_class": "a", "count": 99}]},
            "gpu_first_available[0].count must be 1 to 8",
        ),
        ({"gpu_first_available": [{"device_class": "a", "selectors": "x"}]}, "selectors must be a list"),
        ({"gpu_first_available": ["a"]}, "gpu_first_available[0] must be a mapping"),
    ],
)
def test_invalid_settings_are_refused_with_the_setting_named(settings: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidSettings) as e:
        request_from(settings)
    assert says in str(e.value)
    assert isinstance(e.value, ValueError)


def test_a_profiles_overrides_and_default_choices_apply_over_the_spawners_settings() -> None:
    profile = {
        **mig_profile("1g.10gb", "small"),
        "profile_options": {
            "n": {
                "choices": {
                    "one": {"kubespawner_override": {"gpu_count": 1}},
                    "two": {"default": True, "kubespawner_override": {"gpu_count": 2}},
                }
            }
        },
    }
    settings = profile_settings(SPAWNER, profile)
    assert settings["gpu_count"] == 2 and settings["gpu_device_class"] == "mig.nvidia.com"
    assert request_from(settings).describe() == "2 x MIG 1g.10gb"
    called = profile_settings(SPAWNER, {"kubespawner_override": {"gpu_count": lambda sp: 3}})
    assert called["gpu_count"] == 3, "a callable override is called with the spawner, as KubeSpawner does"


def test_a_profile_starts_from_the_configured_settings_not_the_last_profile_applied() -> None:
    """KubeSpawner applies a chosen profile's overrides to the spawner itself: a user whose
    session runs a MIG slice has the slice's selectors on the spawner. Another profile (the
    picker's, a job's size) must not inherit them (the lifecycle fuzzer found a whole-GPU job
    whose claim asked a whole GPU for a MIG profile: "CEL runtime error: no such key: profile")."""
    from traitlets import HasTraits
    from traitlets.config import Config

    from gpusessions.hub.spawner import GPUSessionSpawner

    config = Config()
    config.KubeSpawner.gpu_count_max = 4
    config.GPUSessionSpawner.gpu_selectors = ["device.attributes['gpu.nvidia.com'].brand == 'x'"]
    spawner = GPUSessionSpawner.__new__(GPUSessionSpawner)
    HasTraits.__init__(spawner)  # its traits only: no hub, no cluster
    spawner.config = config
    mig = mig_profile("1g.10gb", "Small slice")
    spawner.gpu_device_class = "mig.nvidia.com"  # what KubeSpawner's _apply_overrides leaves
    spawner.gpu_selectors = ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"]
    whole = {"slug": "gpu", "kubespawner_override": {"gpu_device_class": "gpu.nvidia.com"}}
    settings = profile_settings(spawner, whole)
    assert settings["gpu_device_class"] == "gpu.nvidia.com"
    assert settings["gpu_selectors"] == ["device.attributes['gpu.nvidia.com'].brand == 'x'"]
    assert settings["gpu_count_max"] == 4 and settings["gpu_count"] == 1
    assert request_from(profile_settings(spawner, mig)).describe() == "MIG 1g.10gb"


def test_the_picker_checks_a_profile_as_the_spawner_does() -> None:
    """A profile the spawner would refuse is shown as invalid, not counted as another size."""
    bad = {
        "slug": "big",
        "display_name": "Big",
        "kubespawner_override": {"gpu_device_class": "gpu.nvidia.com", "gpu_count": 99},
    }
    with pytest.raises(InvalidSettings):
        picker.profile_request(SPAWNER, bad)
    inv_derived: Any = (None, set(), {}, {})
    (row,) = picker.compute_figures(SPAWNER, [bad], inv_derived)
    assert row["state"] == "unknown" and row["availability"] == "Availability unknown."
    assert row["note"].startswith("invalid profile settings: gpu_count must be a whole number from 1 to 8")
    assert set(row) == {
        "slug",
        "display_name",
        "state",
        "free",
        "total",
        "gpu",
        "memory",
        "compute",
        "availability",
        "note",
        "queue",
    }, "the availability JSON's shape for an invalid profile"
