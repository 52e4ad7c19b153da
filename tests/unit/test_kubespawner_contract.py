"""GPUSessionSpawner keeps KubeSpawner's contract and Zero to JupyterHub's.

KubeSpawner's own test suite, run against GPUSessionSpawner, is the full check (docs/spawner.md
has the command); these are the parts of that contract we changed once, and the KubeSpawner
internals we rely on, checked without a cluster."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyterhub.spawner import SpawnException
from kubernetes_asyncio.client import ApiClient, V1OwnerReference
from kubernetes_asyncio.config import kube_config
from kubespawner import KubeSpawner

from gpusessions.hub.session import Allocation
from gpusessions.hub.spawner import GPUSessionSpawner, InvalidUserOptions
from localcluster.testing import allocation_status

from .spawnertools import KUBECONFIG


def in_loop(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an async test body in a fresh loop (KubeSpawner builds its API client in the loop)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


@pytest.fixture(autouse=True)
def kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """KubeSpawner loads a kube config when it is built; nothing here contacts the server."""
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    yield


PROFILES: list[dict[str, Any]] = [
    {"display_name": "CPU only", "slug": "cpu", "default": True},
    {
        "display_name": "MIG 1g.10gb",
        "slug": "mig",
        "kubespawner_override": {"gpu_device_class": "mig.nvidia.com", "gpu_allocation_timeout": 30},
    },
    {
        "display_name": "Choose an image",
        "slug": "images",
        "profile_options": {
            "image": {
                "display_name": "Image",
                "choices": {
                    "minimal": {
                        "display_name": "minimal",
                        "kubespawner_override": {"image": "quay.io/jupyterhub/singleuser:5"},
                    }
                },
                "unlisted_choice": {
                    "enabled": True,
                    "display_name": "Other image",
                    "validation_regex": "^quay.io/.+$",
                    "kubespawner_override": {"image": "{value}"},
                },
            }
        },
    },
]


# -- options: options_from_form is KubeSpawner's; refusals are ValueErrors ---------------------
@in_loop
async def test_options_from_form_is_synchronous_and_validates_nothing() -> None:
    """As KubeSpawner defines it (KubeSpawner's test_user_options_set_from_form_invalid_regex):
    a dict at once, an invalid value included; load_user_options refuses it later."""
    spawner = GPUSessionSpawner(_mock=True, profile_list=PROFILES)
    options = spawner.options_from_form(
        {"profile": ["images"], "profile-option-images--image--unlisted-choice": ["evil/image:1"]}
    )
    assert options == {"profile": "images", "image--unlisted-choice": "evil/image:1"}
    # An empty optional field is no choice at all.
    assert spawner.options_from_form(
        {"profile": ["images"], "profile-option-images--image": ["minimal"], "x": [""]}
    ) == {"profile": "images", "image": "minimal"}


@in_loop
async def test_load_user_options_refuses_with_a_value_error_that_is_a_spawn_exception() -> None:
    spawner = GPUSessionSpawner(_mock=True, profile_list=PROFILES)
    spawner.user_options = {"profile": "images", "image--unlisted-choice": "evil/image:1"}
    with pytest.raises(ValueError, match="is not a valid image") as err:
        await spawner.load_user_options()
    # Also a SpawnException: a 400 that is not a hub failure, and the spawn page shows the
    # message alone (JupyterHub's format_exception reads jupyterhub_message).
    assert isinstance(err.value, SpawnException) and isinstance(err.value, InvalidUserOptions)
    assert err.value.status_code == 400 and err.value.reason == "invalid-options"
    assert err.value.jupyterhub_message == "'evil/image:1' is not a valid image: it must match ^quay.io/.+$."


@in_loop
async def test_the_spawn_page_validates_a_submitted_form_at_once() -> None:
    """JupyterHub's spawn page awaits run_options_from_form: a tampered form is refused there
    (the form again with the reason), before anything starts."""
    spawner = GPUSessionSpawner(_mock=True, profile_list=PROFILES)
    with pytest.raises(InvalidUserOptions, match="Unknown profile 'nope'"):
        (await spawner.run_options_from_form({"profile": ["nope"]}))
    assert (await spawner.run_options_from_form({"profile": ["mig"]})) == {"profile": "mig"}


@in_loop
async def test_load_user_options_applies_the_profile_as_kubespawner_does() -> None:
    spawner = GPUSessionSpawner(_mock=True, profile_list=PROFILES)
    spawner.user_options = spawner.options_from_form(
        {"profile": ["images"], "profile-option-images--image--unlisted-choice": ["quay.io/x/y:1"]}
    )
    await spawner.load_user_options()
    assert spawner.image == "quay.io/x/y:1"


# -- start_timeout: raised by the GPU wait only for a GPU profile ------------------------------
@pytest.mark.parametrize(
    ("options", "expected"),
    [({}, 60), ({"profile": "cpu"}, 60), ({"profile": "images"}, 60), ({"profile": "mig"}, 90)],
)
@in_loop
async def test_start_timeout_covers_the_gpu_wait_of_gpu_profiles_only(
    options: dict[str, str], expected: int
) -> None:
    spawner = GPUSessionSpawner(_mock=True, profile_list=PROFILES, start_timeout=60)
    spawner.user_options = options
    assert spawner.start_timeout == 60
    assert spawner._base_start_timeout + spawner._allocation_wait() == expected


@in_loop
async def test_start_sets_start_timeout_from_the_configured_one() -> None:
    spawner = GPUSessionSpawner(_mock=True, profile_list=PROFILES, start_timeout=60)

    async def fake_start() -> None:
        return None

    spawner._start = fake_start  # type: ignore[method-assign]
    for options, expected in [({"profile": "mig"}, 90), ({"profile": "cpu"}, 60), ({"profile": "mig"}, 90)]:
        spawner.user_options = options
        await spawner.start()
        assert spawner.start_timeout == expected
    spawner.start_timeout = 100  # set by hand (or a profile's override) since the last start
    spawner.user_options = {"profile": "cpu"}
    await spawner.start()
    assert spawner.start_timeout == 100


@in_loop
async def test_start_timeout_without_profiles_follows_the_spawners_own_gpu() -> None:
    cpu = GPUSessionSpawner(_mock=True, start_timeout=60)
    gpu = GPUSessionSpawner(_mock=True, start_timeout=60, gpu_device_class="gpu.nvidia.com")
    assert cpu._allocation_wait() == 0
    assert gpu._allocation_wait() == gpu.gpu_allocation_timeout == 300

    async def profiles(spawner: Any) -> list[dict[str, Any]]:
        return PROFILES

    unknown = GPUSessionSpawner(_mock=True, start_timeout=60, profile_list=profiles)
    assert unknown._allocation_wait() == 300  # a callable list: the global wait, to be safe


# -- labels: the notebook pod is selected as a plain KubeSpawner pod ----------------------------
# Zero to JupyterHub 4.4 configures KubeSpawner's common_labels in its hub config
# (jupyterhub/files/hub/jupyterhub_config.py) and singleuser.extraLabels (values.yaml); the
# release here is "jhub".
Z2JH_CONFIG: dict[str, Any] = {
    "common_labels": {
        "app": "jupyterhub",
        "app.kubernetes.io/name": "jupyterhub",
        "release": "jhub",
        "app.kubernetes.io/instance": "jhub",
        "chart": "jupyterhub-4.4.0",
        "helm.sh/chart": "jupyterhub-4.4.0",
        "app.kubernetes.io/managed-by": "kubespawner",
    },
    "extra_labels": {"hub.jupyter.org/network-access-hub": "true"},
}
# What selects user pods in Zero to JupyterHub 4.4 (its templates) and in KubeSpawner itself.
SELECTORS: dict[str, dict[str, str]] = {
    # singleuser/netpol.yaml podSelector, and the hub's and the proxy's egress to
    # singleuser-server (hub/netpol.yaml, proxy/netpol.yaml): the `jupyterhub.matchLabels`
    # helper with componentLabel singleuser-server.
    "z2jh singleuser NetworkPolicy, hub and proxy egress": {
        "component": "singleuser-server",
        "app": "jupyterhub",
        "release": "jhub",
    },
    # The `jupyterhub.matchLabelsModern` helper (z2jh 5 drops the legacy app and release labels).
    "z2jh modern matchLabels": {
        "app.kubernetes.io/component": "singleuser-server",
        "app.kubernetes.io/name": "jupyterhub",
        "app.kubernetes.io/instance": "jhub",
    },
    # hub/netpol.yaml ingress: pods labelled so may reach the hub (singleuser.extraLabels).
    "z2jh hub ingress": {"hub.jupyter.org/network-access-hub": "true"},
    # KubeSpawner's pod reflector (it finds its pods by the legacy component label).
    "KubeSpawner pod reflector": {"component": "singleuser-server"},
}
OURS = {"gpusessions.io/component", "gpusessions.io/claim", "kai.scheduler/queue"}

CLAIM = {
    "metadata": {"name": "gpu-mock-name---6241db84", "namespace": "default"},
    "status": allocation_status("gpu-node-0", "gpu-0-mig-1g10gb-0", "gpu-node-0"),
}


async def _manifest(spawner: KubeSpawner) -> dict[str, Any]:
    pod = await spawner.get_pod_manifest()
    async with ApiClient() as client:
        return client.sanitize_for_serialization(pod)  # type: ignore[no-any-return]


async def _pods(gpu: bool, **config: Any) -> tuple[dict[str, Any], dict[str, Any], GPUSessionSpawner]:
    """(our notebook pod, a plain KubeSpawner pod, our spawner) with the same configuration."""
    ours = GPUSessionSpawner(_mock=True, **config)

    async def prepare() -> None:  # the GPU phase, without a cluster
        if gpu:
            ours._gpu_alloc = Allocation(CLAIM, kept=False, gateway_url=None)
            ours._gpu_state = {"describe": "MIG 1g.10gb", "claim": CLAIM["metadata"]["name"]}

    ours._prepare_gpu = prepare  # type: ignore[method-assign]
    plain = KubeSpawner(_mock=True, **{k: v for k, v in config.items() if KubeSpawner.class_traits().get(k)})
    return await _manifest(ours), await _manifest(plain), ours


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("kai", [False, True], ids=["plain", "kai"])
@pytest.mark.parametrize("gpu", [False, True], ids=["cpu-only", "gpu"])
@in_loop
async def test_the_notebook_pod_keeps_every_kubespawner_label(gpu: bool, kai: bool) -> None:
    config = {**Z2JH_CONFIG, **({"kai_queue": "team-a"} if kai else {})}
    ours, plain, _ = await _pods(gpu, **config)
    mine, theirs = ours["metadata"]["labels"], plain["metadata"]["labels"]
    assert {k: mine.get(k) for k in theirs} == theirs
    assert set(mine) - set(theirs) <= OURS
    assert mine["gpusessions.io/component"] == "notebook"
    assert ("gpusessions.io/claim" in mine) == gpu
    for name, selector in SELECTORS.items():
        assert _selects(selector, theirs), f"{name} does not select a plain KubeSpawner pod"
        assert _selects(selector, mine), f"{name} does not select our notebook pod"


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu-only", "gpu"])
@pytest.mark.parametrize("config", [{}, Z2JH_CONFIG], ids=["kubespawner-defaults", "z2jh"])
@in_loop
async def test_kubespawners_service_selects_the_notebook_pod(gpu: bool, config: dict[str, Any]) -> None:
    """With services_enabled (or internal_ssl) KubeSpawner makes a Service whose selector is the
    pod's labels (app.kubernetes.io/component and managed-by included)."""
    ours, _, spawner = await _pods(gpu, services_enabled=True, **config)
    owner = V1OwnerReference(api_version="v1", kind="Pod", name=spawner.pod_name, uid="u-1")
    service = spawner.get_service_manifest(owner, 8888)
    assert service.spec.selector
    assert _selects(service.spec.selector, ours["metadata"]["labels"])


# -- the KubeSpawner internals we rely on ------------------------------------------------------
# (name, parameters) of KubeSpawner/JupyterHub Spawner members that are not public API and that
# gpusessions calls, overrides or reads (hub/spawner.py and these tests). If one is renamed or
# changes its parameters in a KubeSpawner release, this fails before anything else does.
PRIVATE_METHODS = {
    "_options_from_form": ["formdata"],
    "_make_create_pod_request": ["pod", "request_timeout"],
    "_sorted_dict_values": ["src"],
    "_get_initialized_profile_list": ["profile_list"],
    "_get_profile": ["slug", "profile_list"],
    "_expand_user_properties": ["template", "slug_scheme"],
    "_expand_all": ["src"],
    "_start": [],
    "_build_pod_labels": ["extra_labels"],
}
PRIVATE_ATTRIBUTES = ["_log_name", "_start_future", "_spawn_pending", "_start_pending"]


@pytest.mark.parametrize("name", sorted(PRIVATE_METHODS))
@in_loop
async def test_the_kubespawner_internals_we_use_are_there(name: str) -> None:
    method = getattr(KubeSpawner, name, None)
    assert callable(method), f"KubeSpawner.{name} is gone"
    params = list(inspect.signature(method).parameters)[1:]
    assert params == PRIVATE_METHODS[name], f"KubeSpawner.{name} now takes {params}"


@in_loop
async def test_the_spawner_attributes_we_read_are_there() -> None:
    spawner = KubeSpawner(_mock=True)
    for name in PRIVATE_ATTRIBUTES:
        assert hasattr(spawner, name), f"KubeSpawner has no {name}"
    # options_from_form defaults to KubeSpawner's _options_from_form (which we extend).
    assert spawner.options_from_form == spawner._options_from_form
    mine = GPUSessionSpawner(_mock=True)
    assert mine.options_from_form == mine._options_from_form
    assert not inspect.iscoroutinefunction(mine.options_from_form)


def test_the_notebook_pods_delete_is_the_one_a_park_gets_its_grace_period_in() -> None:
    """Kernels in the notebook pod park in its grace period: GPUSessionSpawner raises the grace
    of KubeSpawner's delete request (whose stop passes `delete_grace_period`, 1 s, or 0 for now)."""
    params = list(inspect.signature(KubeSpawner._make_delete_pod_request).parameters)
    assert params == ["self", "pod_name", "delete_options", "grace_seconds", "request_timeout"]
    assert KubeSpawner.delete_grace_period.default_value == 1  # type: ignore[attr-defined]
    assert "self.delete_grace_period" in inspect.getsource(KubeSpawner.stop)
    assert "_make_delete_pod_request" in inspect.getsource(KubeSpawner.stop)
