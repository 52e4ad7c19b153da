"""Helpers for tests that drive a real JupyterHub through its REST API."""

from __future__ import annotations

import http.cookiejar
import json
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from localcluster import waits
from localcluster.hubproc import Hub, start_hub
from localcluster.kubeapi import KubeAPI

GPU_HUB_CONFIG = """
from gpusessions.hub.handlers import configure_hub
from gpusessions.core.profiles import default_profiles, mig_profile

c.JupyterHub.spawner_class = "gpusessions"
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = "test-password"
c.JupyterHub.allow_named_servers = True
c.JupyterHub.cleanup_servers = False
c.Authenticator.admin_users = {{"admin"}}
c.Authenticator.allow_all = True
c.KubeSpawner.namespace = {namespace!r}
c.KubeSpawner.image = "quay.io/jupyterhub/singleuser:5"
c.KubeSpawner.start_timeout = 60
c.KubeSpawner.http_timeout = 60
c.GPUSessionSpawner.gpu_allocation_timeout = 60

EXTRA = [
    {{
        "display_name": "Nothing this big", "slug": "huge",
        "kubespawner_override": {{
            "gpu_device_class": "gpu.nvidia.com",
            "gpu_selectors": ["device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('200Gi')) >= 0"],
            "gpu_allocation_timeout": 4,
        }},
    }},
    {{
        "display_name": "Whole GPU, short wait", "slug": "gpu-short",
        "kubespawner_override": {{"gpu_device_class": "gpu.nvidia.com", "gpu_allocation_timeout": 4}},
    }},
    {{
        "display_name": "Unknown class", "slug": "tpu",
        "kubespawner_override": {{"gpu_device_class": "tpu.example.com"}},
    }},
    {{
        "display_name": "Absurd count", "slug": "absurd",
        "kubespawner_override": {{"gpu_device_class": "mig.nvidia.com", "gpu_count": 1000}},
    }},
    {{
        "display_name": "With options", "slug": "opts",
        "kubespawner_override": {{
            "gpu_device_class": "mig.nvidia.com",
            "gpu_selectors": ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"],
        }},
        "profile_options": {{
            "count": {{"display_name": "Devices", "choices": {{
                "1": {{"display_name": "one", "kubespawner_override": {{"gpu_count": 1}}}},
                "2": {{"display_name": "two", "kubespawner_override": {{"gpu_count": 2}}}},
            }}}},
            "image": {{"display_name": "Image", "choices": {{
                "default": {{"display_name": "default", "kubespawner_override": {{}}}},
            }}, "unlisted_choice": {{
                "enabled": True,
                "validation_regex": "quay[.]io/jupyterhub/singleuser:[0-9.]+",
                "kubespawner_override": {{"image": "{{value}}"}},
            }}}},
        }},
    }},
    mig_profile("1g.10gb", "no release at stop", keep_gpu_on_stop=False)
    | {{"slug": "mig-nokeep", "display_name": "MIG 1g.10gb, released at stop"}},
    {{
        "display_name": "First available", "slug": "firstavail",
        "kubespawner_override": {{"gpu_first_available": [
            {{"device_class": "mig.nvidia.com",
              "selectors": ["device.attributes['gpu.nvidia.com'].profile == '9g.99gb'"]}},
            {{"device_class": "mig.nvidia.com",
              "selectors": ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"]}},
        ]}},
    }},
]
SECRET = {{"display_name": "Admins only", "slug": "secret", "kubespawner_override": {{}}}}


def profiles(spawner):
    out = default_profiles() + EXTRA
    if spawner.user.admin:
        out = out + [SECRET]
    return out


c.KubeSpawner.profile_list = profiles
configure_hub(c)
"""


def gpu_hub(namespace: str, workdir: Path, ports: tuple[int, int, int] | None = None) -> Hub:
    """A hub with GPUSessionSpawner; pass the ports of an earlier hub to restart it in place."""
    return start_hub(GPU_HUB_CONFIG.format(namespace=namespace), workdir, ports=ports)


def server_model(hub: Hub, user: str, server: str = "") -> dict[str, Any] | None:
    code, body = hub.api("GET", f"/users/{user}")
    if code != 200:
        return None
    return (body or {}).get("servers", {}).get(server)  # type: ignore[no-any-return]


def server_path(user: str, server: str = "") -> str:
    return f"/users/{user}/servers/{server}" if server else f"/users/{user}/server"


def start(hub: Hub, user: str, options: dict[str, Any] | None, server: str = "") -> tuple[int, Any]:
    hub.api("POST", f"/users/{user}")
    return hub.api("POST", server_path(user, server), {"user_options": options})


def wait_ready(hub: Hub, user: str, server: str = "", timeout: float = 90) -> dict[str, Any]:
    """Until the server is ready; a start seen under way that ends without a ready server (the
    spawn failed) fails at once, with what the hub logged."""
    seen_pending = False

    def ready() -> dict[str, Any] | None:
        nonlocal seen_pending
        m = server_model(hub, user, server)
        if m and m.get("ready"):
            return m
        if m and m.get("pending") == "spawn":
            seen_pending = True
        elif seen_pending:
            ended = f"{user}/{server}: the start ended without a ready server"
            raise AssertionError(f"{ended}\n{hub.log_tail(4000)}")
        return None

    return waits.wait_for(ready, timeout, f"{user}/{server} to be ready", lambda: hub.log_tail(4000))


def wait_stopped(hub: Hub, user: str, server: str = "", timeout: float = 60) -> None:
    def stopped() -> bool:
        m = server_model(hub, user, server)
        return m is None or (not m.get("ready") and not m.get("pending"))

    waits.wait_for(stopped, timeout, f"{user}/{server} to stop", lambda: hub.log_tail(3000))


def spawn(hub: Hub, user: str, options: dict[str, Any] | None, server: str = "") -> dict[str, Any]:
    code, body = start(hub, user, options, server)
    assert code in (201, 202), (code, body)
    return wait_ready(hub, user, server)


def stop(hub: Hub, user: str, server: str = "") -> None:
    code, body = hub.api("DELETE", server_path(user, server))
    assert code in (202, 204), (code, body)
    wait_stopped(hub, user, server)


def progress_messages(
    hub: Hub, user: str, server: str = "", timeout: float = 90, live: list[str] | None = None
) -> list[str]:
    """Read the server's progress event stream (as the spawn page does) until it ends.

    With `live`, messages are appended there as they arrive (for a reader thread)."""
    path = f"/users/{user}/servers/{server}/progress" if server else f"/users/{user}/server/progress"
    req = urllib.request.Request(hub.hub_api + path, headers={"Authorization": f"token {hub.token}"})
    messages: list[str] = [] if live is None else live
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("data:"):
                ev = json.loads(line[5:])
                if ev.get("message"):
                    messages.append(ev["message"])
                if ev.get("ready") or ev.get("failed"):
                    break
    return [] if live is not None else messages


def follow_spawn(
    hub: Hub, user: str, options: dict[str, Any] | None, server: str = "", timeout: float = 90
) -> tuple[tuple[int, Any], list[str]]:
    """Start a server and read its progress stream from the moment the spawn is pending, as the
    spawn page does: the start's answer and the stream's messages (the last one says ready or failed).

    The stream is asked for again and again until the hub has a spawn to report on (400 or 404 before), so
    even a spawn of a second is followed from its beginning."""
    result: dict[str, tuple[int, Any]] = {}
    hub.api("POST", f"/users/{user}")
    starter = threading.Thread(target=lambda: result.update(r=start(hub, user, options, server)))
    starter.start()
    messages: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                progress_messages(hub, user, server, timeout=timeout, live=messages)
                break
            except urllib.error.HTTPError as e:
                if e.code not in (400, 404) or time.monotonic() > deadline or "r" in result:
                    raise
                time.sleep(0.01)
    finally:
        starter.join(timeout)
    return result["r"], messages


def notebook_get(hub: Hub, url_path: str) -> tuple[int, Any]:
    req = urllib.request.Request(hub.url + url_path, headers={"Authorization": f"token {hub.token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, json.loads(r.read())


def container_pid(api: KubeAPI, namespace: str, pod: str, container: str | None = None) -> int:
    """The pid of the latest start of the pod's container (the first container by default)."""
    if container is None:
        container = api.get("Pod", pod, namespace)["spec"]["containers"][0]["name"]
    events = waits.events_for(api, namespace, "Pod", pod)
    pat = rf"Started container {re.escape(container)} \(pid (\d+)"
    pids = [int(m.group(1)) for e in events if (m := re.search(pat, e))]
    assert pids, events
    return pids[-1]


def process_env(api: KubeAPI, namespace: str, pod: str, container: str | None = None) -> dict[str, str]:
    """The environment of the pod's container process (the first container by default), from /proc."""
    pid = container_pid(api, namespace, pod, container)
    with open(f"/proc/{pid}/environ", "rb") as f:
        items = [kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv]
    return {k.decode(): v.decode() for k, v in items}


def gpu_objects(api: KubeAPI, namespace: str) -> dict[str, list[dict[str, Any]]]:
    sel = "app.kubernetes.io/managed-by=gpusessions"
    return {
        "claims": api.list("ResourceClaim", namespace, label_selector=sel)["items"],
        "holders": api.list("Pod", namespace, label_selector=sel + ",app.kubernetes.io/component=holder")[
            "items"
        ],
        # Notebook pods keep KubeSpawner's labels; gpusessions marks them with its own.
        "notebooks": api.list("Pod", namespace, label_selector="gpusessions.io/component=notebook")["items"],
    }


def logged_in(hub: Hub | str, user: str, password: str = "test-password") -> urllib.request.OpenerDirector:
    """A cookie session of `user`, logged in through the hub's login form (DummyAuthenticator);
    `hub` is a Hub or its public URL (http://127.0.0.1:<port>)."""
    url = hub if isinstance(hub, str) else hub.url
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(url + "/hub/login", timeout=30).read()
    xsrf = next(c.value for c in jar if c.name == "_xsrf")
    data = urllib.parse.urlencode({"username": user, "password": password, "_xsrf": xsrf}).encode()
    opener.open(url + "/hub/login", data=data, timeout=30).read()  # a wrong password raises (403)
    return opener


def spawn_form(opener: urllib.request.OpenerDirector, url: str, user: str) -> tuple[str, str]:
    """The spawn form of a logged-in `user` and the xsrf token its action carries."""
    page = opener.open(url + f"/hub/spawn/{user}", timeout=30).read().decode()
    m = re.search(r'action="[^"]*[?&]_xsrf=([^"&]+)"', page)
    assert m, page[:2000]
    return page, m.group(1)


def user_token(hub: Hub, user: str) -> str:
    """An API token of `user` (created with the user if needed)."""
    hub.api("POST", f"/users/{user}")
    code, tok = hub.api("POST", f"/users/{user}/tokens", {"note": "test"})
    assert code == 201, tok
    return str(tok["token"])


def availability(hub: Hub, token: str) -> dict[str, Any]:
    """GET /hub/api/gpusessions/availability with a user's token."""
    req = urllib.request.Request(
        hub.hub_api + "/gpusessions/availability", headers={"Authorization": f"token {token}"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def nb(hub: Hub, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(
        hub.url + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"token {token or hub.token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        return e.code, None


def open_notebook(hub: Hub, user: str, path: str, token: str | None = None) -> str:
    """A session of a notebook at `path` in the user's server, as JupyterLab opens one: its
    kernel's id."""
    name = path.rsplit("/", 1)[-1]
    body = {"path": path, "name": name, "type": "notebook", "kernel": {"name": "python3"}}
    code, s = nb(hub, "POST", f"/user/{user}/api/sessions", body, token=token)
    assert code == 201, (code, s)
    return str(s["kernel"]["id"])


def allocated_device(api: KubeAPI, namespace: str, claim: str) -> tuple[str, str, str]:
    c = api.get("ResourceClaim", claim, namespace)
    r = c["status"]["allocation"]["devices"]["results"][0]
    node = c["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
    return r["pool"], r["device"], node
