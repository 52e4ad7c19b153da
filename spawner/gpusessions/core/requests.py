"""A profile's GPU settings made into a `GPURequest`, checked (pure).

One function, `request_from`, for everyone who turns settings into a request: the
spawner (its traits, with the chosen profile applied) and the picker (each profile's
`kubespawner_override` over the spawner's settings, `profile_settings`), so a profile
the spawner would refuse is never counted as if it were valid.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpusessions.core.claims import Alternative, GPURequest
from gpusessions.core.sizes import size_selectors

# The spawner settings (traits) a GPU request is made from.
GPU_SETTINGS = (
    "gpu_device_class",
    "gpu_count",
    "gpu_count_max",
    "gpu_selectors",
    "gpu_size",
    "gpu_first_available",
)
_DEFAULT_COUNT_MAX = 8


class InvalidSettings(ValueError):
    """A profile's GPU settings that make no valid request; the message names the setting."""


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _selectors(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(s, str) for s in value):
        raise InvalidSettings(f"{what} must be a list of CEL strings")
    return tuple(value)


def request_from(settings: Mapping[str, Any]) -> GPURequest:
    """The GPU request of these settings (names in `GPU_SETTINGS`; missing ones take the
    spawner's defaults), or `InvalidSettings` saying what is wrong."""
    count_max = settings.get("gpu_count_max", _DEFAULT_COUNT_MAX)
    if not _whole(count_max) or count_max < 1:
        raise InvalidSettings(f"gpu_count_max must be a whole number of at least 1, not {count_max!r}")
    count = settings.get("gpu_count", 1)
    if not _whole(count) or not 1 <= count <= count_max:
        raise InvalidSettings(f"gpu_count must be a whole number from 1 to {count_max}, not {count!r}")
    device_class = settings.get("gpu_device_class") or ""
    if not isinstance(device_class, str):
        raise InvalidSettings(f"gpu_device_class must be a string, not {device_class!r}")
    alts = []
    for i, a in enumerate(settings.get("gpu_first_available") or []):
        if not isinstance(a, Mapping):
            raise InvalidSettings(f"gpu_first_available[{i}] must be a mapping, not {a!r}")
        unknown = set(a) - {"device_class", "count", "selectors"}
        if unknown or not isinstance(a.get("device_class"), str) or not a.get("device_class"):
            raise InvalidSettings(
                f"gpu_first_available[{i}] needs a device_class and may have count and selectors "
                f"(unknown keys: {sorted(unknown)})"
            )
        n = a.get("count", 1)
        if not _whole(n) or not 1 <= n <= count_max:
            raise InvalidSettings(f"gpu_first_available[{i}].count must be 1 to {count_max}")
        sels = a.get("selectors", [])
        if not isinstance(sels, list) or not all(isinstance(s, str) for s in sels):
            raise InvalidSettings(f"gpu_first_available[{i}].selectors must be a list of CEL strings")
        alts.append(Alternative(a["device_class"], n, tuple(sels)))
    size = settings.get("gpu_size")
    if size is not None and not isinstance(size, Mapping):
        raise InvalidSettings(f"gpu_size must be a mapping, not {size!r}")
    try:
        sized = size_selectors(dict(size) if size else None)
    except ValueError as e:  # an unknown key, a quantity or a version that does not parse
        raise InvalidSettings(str(e)) from None
    return GPURequest(
        device_class=device_class if not alts else "",
        count=count,
        selectors=_selectors(settings.get("gpu_selectors"), "gpu_selectors") + sized,
        first_available=tuple(alts),
    )


def profile_settings(spawner: Any, profile: Mapping[str, Any]) -> dict[str, Any]:
    """The GPU settings a profile gives: its `kubespawner_override` (and its options' default
    choices') over the spawner's configured settings (`configured`); a callable value is
    called with the spawner, as KubeSpawner does."""
    ov: dict[str, Any] = dict(profile.get("kubespawner_override") or {})
    for option in (profile.get("profile_options") or {}).values():
        choices = option.get("choices") or {}
        default: Mapping[str, Any] = next(
            (c for c in choices.values() if c.get("default")), next(iter(choices.values()), {})
        )
        ov.update(default.get("kubespawner_override") or {})
    out: dict[str, Any] = {}
    for name in GPU_SETTINGS:
        if name not in ov and not hasattr(spawner, name):
            continue  # a stand-in spawner without it: the default
        v = ov[name] if name in ov else configured(spawner, name)
        out[name] = v(spawner) if callable(v) else v
    return out


_UNSET = object()


def configured(spawner: Any, name: str) -> Any:
    """A spawner setting as configured, not as the last profile applied left it: KubeSpawner
    sets a chosen profile's overrides on the spawner itself (a user's running MIG session
    leaves its `gpu_selectors` there), so another profile's settings must not start from
    the live value. The config's value for the most specific class of the spawner that has
    one (as traitlets resolves it), else the trait's default; a plain object's attribute."""
    config = getattr(spawner, "config", None)
    has_trait = getattr(spawner, "has_trait", None)
    if config is None or not callable(has_trait) or not has_trait(name):
        return getattr(spawner, name, None)
    value: Any = _UNSET
    for cls in reversed(type(spawner).__mro__):
        section = config.get(cls.__name__, None)
        if section is not None and name in section:
            value = section[name]
    default = spawner.trait_defaults(name)
    if value is _UNSET:
        return default
    get_value = getattr(value, "get_value", None)  # a LazyConfigValue (c.X.y.append(...))
    return get_value(default) if callable(get_value) else value
