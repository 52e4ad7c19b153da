"""Bad input gets a clear 400 and creates nothing; hostile usernames get valid, distinct names."""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

from .hubtools import gpu_hub, gpu_objects, logged_in, server_model, spawn, spawn_form, start, wait_ready

pytestmark = pytest.mark.cluster

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@pytest.fixture(scope="module")
def module_ns(cluster: Any) -> Iterator[str]:
    from localcluster.testing import namespace_name

    api: KubeAPI = cluster.api
    name = namespace_name("spawner-input")
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    api.delete_collection("Pod", name, grace_period=0)
    api.delete("Namespace", name)


@pytest.fixture(scope="module")
def hub(module_ns: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    h = gpu_hub(module_ns, tmp_path_factory.mktemp("hub"))
    yield h
    h.stop()


BAD_OPTIONS = [
    ({"profile": "nope"}, "Unknown profile 'nope'"),
    ({"profile": "secret"}, "Unknown profile 'secret'"),  # hidden: only admins are offered it
    ({"profile": "mig-1g-10gb' || true"}, "Unknown profile"),
    ({"profile": "mig-1g-10gb\n"}, "control characters"),
    ({"profile": 5}, "must be a string, not int"),
    ({"profile": ["mig-1g-10gb"]}, "must be a string, not list"),
    ({"profile": "mig-1g-10gb", "gpu_count": "8"}, "Unknown option(s) for profile 'mig-1g-10gb': gpu_count"),
    ({"profile": "opts", "count": "64"}, "'64' is not a choice for 'count'"),
    ({"profile": "opts", "count": 2}, "must be a string, not int"),
    (
        {"profile": "opts", "image--unlisted-choice": "quay.io/jupyterhub/singleuser:5;rm -rf /"},
        "is not a valid image",
    ),
    (
        {"profile": "opts", "image--unlisted-choice": "quay.io/jupyterhub/singleuser:" + "5" * 300},
        "longer than 256",
    ),
    ({"profile": "opts", "count": "1", "count--unlisted-choice": "1"}, "not both"),
    ({"profile": "opts", "count--unlisted-choice": "7"}, "does not accept other values"),
    ({"profile": "absurd"}, "gpu_count must be a whole number from 1 to 8, not 1000"),
    ({"profile": "x" * 5000}, "longer than 256"),
]


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS, ids=[str(i) for i in range(len(BAD_OPTIONS))])
def test_rest_api_refuses_bad_options_with_400_and_creates_nothing(
    hub: Hub, api: KubeAPI, module_ns: str, options: dict[str, Any], message: str
) -> None:
    code, body = start(hub, "mallory", options)
    assert code == 400, (code, body)
    assert message in body["message"], body
    assert "Traceback" not in body["message"]
    model = server_model(hub, "mallory")
    assert not (model or {}).get("ready")
    objs = gpu_objects(api, module_ns)
    assert [o["metadata"]["name"] for o in objs["claims"] + objs["holders"]] == []
    assert api.get_or_none("Pod", "jupyter-mallory", module_ns) is None


def test_rest_api_body_must_be_an_object(hub: Hub) -> None:
    hub.api("POST", "/users/mallory")
    code, body = hub.api("POST", "/users/mallory/server", {"user_options": "mig-1g-10gb"})
    assert code == 400 and "user_options must be an object" in body["message"]


def test_admins_see_the_hidden_profile(hub: Hub) -> None:
    hub.api("POST", "/users/admin")
    spawn(hub, "admin", {"profile": "secret"})
    assert hub.api("DELETE", "/users/admin/server")[0] in (202, 204)


def _browser(hub: Hub, user: str) -> tuple[urllib.request.OpenerDirector, str]:
    opener = logged_in(hub, user)
    # The form carries the token for the logged-in session.
    return opener, spawn_form(opener, hub.url, user)[1]


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"profile": "nope"}, "Unknown profile &#39;nope&#39;"),
        ({"profile": "secret"}, "Unknown profile &#39;secret&#39;"),  # hidden: only admins are offered it
        ({"profile": "opts", "profile-option-opts--count": "64"}, "is not a choice for &#39;count&#39;"),
        (
            {
                "profile": "opts",
                "profile-option-opts--image--unlisted-choice": "quay.io/jupyterhub/singleuser:5 x",
            },
            "is not a valid image",
        ),
    ],
)
def test_tampered_form_gets_400_with_the_form_again(
    hub: Hub, api: KubeAPI, module_ns: str, form: dict[str, str], message: str
) -> None:
    opener, xsrf = _browser(hub, "trudy")
    data = urllib.parse.urlencode({**form, "_xsrf": xsrf}).encode()
    with pytest.raises(urllib.error.HTTPError) as err:
        opener.open(hub.url + "/hub/spawn/trudy", data=data, timeout=60)
    assert err.value.code == 400
    page = err.value.read().decode()
    assert message in page
    assert 'name="profile"' in page, "the form is shown again"
    assert 'value="secret"' not in page, "the hidden profile is not offered either"
    assert not (server_model(hub, "trudy") or {}).get("ready")
    objs = gpu_objects(api, module_ns)
    assert [
        o["metadata"]["name"]
        for o in objs["claims"] + objs["holders"]
        if o["metadata"]["annotations"].get("gpusessions.io/user") == "trudy"
    ] == [], "no claim or holder was created"
    assert api.get_or_none("Pod", "jupyter-trudy", module_ns) is None


HOSTILE = [
    "ünïcødé.üser@example.com",
    "a.b",
    "a-b",
    "o'brien+test@corp.example",
    "q" * 200,
    # Both exist through the REST API (only the login form lowers names); the names
    # must not collide, though a plain lowercase slug of both is the same.
    "Alice",
    "alice",
]


def test_hostile_usernames_get_valid_distinct_names(hub: Hub, api: KubeAPI, module_ns: str) -> None:
    for name in HOSTILE:
        code, body = hub.api("POST", "/users/" + urllib.parse.quote(name, safe=""))
        assert code in (201, 409), (name, code, body)
    # All at once, as users arrive: the names must not collide however the starts interleave.
    for name in HOSTILE:
        code, body = start(hub, urllib.parse.quote(name, safe=""), {"profile": "mig-1g-10gb"})
        assert code in (201, 202), (name, code, body)
    for name in HOSTILE:
        wait_ready(hub, urllib.parse.quote(name, safe=""), timeout=180)
    objs = gpu_objects(api, module_ns)
    claims = {c["metadata"]["annotations"]["gpusessions.io/user"]: c for c in objs["claims"]}
    holders = {h["metadata"]["annotations"]["gpusessions.io/user"]: h for h in objs["holders"]}
    assert set(claims) >= set(HOSTILE) and set(holders) >= set(HOSTILE)
    names = [claims[u]["metadata"]["name"] for u in HOSTILE] + [
        holders[u]["metadata"]["name"] for u in HOSTILE
    ]
    assert len(set(names)) == len(names), names
    for n in names:
        assert DNS_LABEL.match(n) and len(n) <= 63, n
    for u in HOSTILE:
        for obj in (claims[u], holders[u]):
            for k, v in obj["metadata"]["labels"].items():
                assert LABEL_VALUE.match(v) and len(v) <= 63, (k, v)
        assert claims[u]["status"]["allocation"], u
    devices = [
        tuple(r["device"] for r in claims[u]["status"]["allocation"]["devices"]["results"]) for u in HOSTILE
    ]
    assert len(set(devices)) == len(devices), "every user got a device of their own"


def test_broken_profile_config_is_refused_clearly_and_creates_nothing(
    api: KubeAPI, tmp_path_factory: pytest.TempPathFactory, module_ns: str
) -> None:
    from localcluster.hubproc import start_hub

    from .hubtools import GPU_HUB_CONFIG

    extra = """
EXTRA.append({"display_name": "Bad CEL", "slug": "badcel", "kubespawner_override": {
    "gpu_device_class": "mig.nvidia.com", "gpu_selectors": ["device.attributes[ broken"]}})
EXTRA.append({"display_name": "Bad first", "slug": "badfirst", "kubespawner_override": {
    "gpu_first_available": [{"device_class": "mig.nvidia.com", "colour": "red"}]}})
"""
    h = start_hub(GPU_HUB_CONFIG.format(namespace=module_ns) + extra, tmp_path_factory.mktemp("badhub"))
    try:
        for user, profile, words in (
            ("cel", "badcel", "Syntax error"),
            ("first", "badfirst", "unknown keys: ['colour']"),
            ("tpu", "tpu", "is not offered on this cluster"),
        ):
            code, body = start(h, user, {"profile": profile})
            message = body["message"] if code == 400 else ""
            if code == 202:
                from .hubtools import progress_messages

                message = progress_messages(h, user)[-1]
            assert words in message, (profile, code, message)
            assert "Traceback" not in message
            objs = gpu_objects(api, module_ns)
            assert not [
                o
                for kind in objs.values()
                for o in kind
                if o["metadata"].get("annotations", {}).get("gpusessions.io/user") == user
            ], (profile, "nothing created")
            assert api.get_or_none("Pod", f"jupyter-{user}", module_ns) is None
    finally:
        h.stop()
