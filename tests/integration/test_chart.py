"""The gpusessions chart installed into the local cluster with helm, and least privilege
proven on the real apiserver (RBAC on): the hub and the culler run as the chart's service
accounts, and the apiserver's audit log shows that they used every right the chart gives
them and needed no other; SubjectAccessReviews show what they cannot do."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpusessions.core import jobs as J
from gpusessions.core.sizes import DeviceMatch
from gpusessions.culler.model import WARNED_AT
from helmtools import CHART, helm, values_file
from localcluster import components, kai, waits
from localcluster.certs import PKI
from localcluster.hubproc import Hub, free_port, start_hub
from localcluster.kubeapi import KubeAPI
from localcluster.paths import ClusterPaths

from .hubtools import spawn, stop, user_token
from .jobtools import call, job_objects
from .kaitools import kai_pod, podgroup_of

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
RES = {"quota": -1, "limit": -1, "overQuotaWeight": 1}

# The Role z2jh 4.x gives its hub (jupyterhub/templates/hub/rbac.yaml): the hub runs with it
# and the gpusessions chart's roles, as on a real install. KubeSpawner's delete_forever
# deletes the user's PVC (z2jh's part); the gpusessions Role must hold the rest.
Z2JH_HUB_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods", "persistentvolumeclaims", "secrets", "services"],
        "verbs": ["get", "watch", "list", "create", "delete"],
    },
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "watch", "list"]},
]

# Rights used only on recovery paths the lifecycle below does not walk, and why.
RECOVERY_ONLY = {
    # Replacing a policy of the same name left by an earlier claim (never in a fresh session).
    ("hub", "networking.k8s.io", "networkpolicies", "delete"),
    # A size's DeviceClass read when the hub's shared watch cannot tell or does not show it (a
    # start answers "not offered on this cluster" in words): a start whose class the watch shows
    # reads nothing (hub/session.py, _check_offered).
    ("hub", "resource.k8s.io", "deviceclasses", "get"),
}


def _prefix(namespace: str) -> str:
    """A short per-test prefix for cluster-scoped names (DeviceClasses, Queues)."""
    return f"t{namespace[-6:]}-"


def _admin_kubeconfig() -> Path:
    return ClusterPaths.default().kubeconfig


def _helm_release(
    verb: str, release: str, namespace: str, values: dict[str, Any], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    """helm install|upgrade of the chart with these values, as the cluster admin."""
    f = values_file(tmp_path, values, f"{verb}-values.yaml")
    return helm(verb, release, str(CHART), "-n", namespace, "-f", str(f), kubeconfig=_admin_kubeconfig())


def _kai_queue_crd(api: KubeAPI) -> None:
    """The cluster serves KAI's own Queue CRD (applied by the local cluster from KAI's source),
    not a stand-in: its schema is the one in deployments/kai-scheduler/crds/."""
    [real] = [
        c for c in kai.crds(kai.crd_dir(ClusterPaths.default())) if c["spec"]["names"]["kind"] == "Queue"
    ]
    served = api.get("CustomResourceDefinition", "queues.scheduling.run.ai")
    assert [v["name"] for v in served["spec"]["versions"]] == [v["name"] for v in real["spec"]["versions"]]
    v2 = next(v for v in served["spec"]["versions"] if v["name"] == "v2")
    assert v2["schema"] == next(v for v in real["spec"]["versions"] if v["name"] == "v2")["schema"]
    waits.wait_for(lambda: _queues_served(api), 30, "scheduling.run.ai/v2 to be served")


def _queues_served(api: KubeAPI) -> bool:
    try:
        api.request("GET", "/apis/scheduling.run.ai/v2/queues")
        return True
    except Exception:
        return False


def _token(api: KubeAPI, namespace: str, sa: str) -> str:
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }
    r = api.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa}/token", body=body)
    return str(r["status"]["token"])


def _sa_kubeconfig(api: KubeAPI, namespace: str, sa: str, path: Path) -> Path:
    pki = PKI(ClusterPaths.default().pki)
    path.write_text(components.token_kubeconfig_yaml(api.creds.server, pki, sa, _token(api, namespace, sa)))
    path.chmod(0o600)
    return path


def _can(
    api: KubeAPI, user: str, verb: str, resource: str, group: str = "", namespace: str | None = None
) -> bool:
    ns = user.split(":")[2] if user.startswith("system:serviceaccount:") else ""
    attrs: dict[str, Any] = {"verb": verb, "resource": resource, "group": group}
    if namespace:
        attrs["namespace"] = namespace
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"],
            "resourceAttributes": attrs,
        },
    }
    return bool(api.create(review)["status"].get("allowed"))


@pytest.fixture
def release(namespace: str) -> Iterator[str]:
    name = f"gs-{namespace}"[:53]
    yield name
    helm(
        "uninstall", name, "-n", namespace, "--ignore-not-found", kubeconfig=_admin_kubeconfig(), check=False
    )


def test_chart_installs_device_classes_and_queues_upgrades_and_uninstalls_cleanly(
    api: KubeAPI, namespace: str, release: str, tmp_path: Path
) -> None:
    _kai_queue_crd(api)
    prefix = _prefix(namespace)
    parent, team = f"{prefix}parent", f"{prefix}team-a"
    values: dict[str, Any] = {
        "deviceClassPrefix": prefix,
        "kai": {
            "enabled": True,
            "parentQueue": {
                "create": True,
                "name": parent,
                "resources": {"gpu": RES, "cpu": RES, "memory": RES},
            },
            "queues": {
                team: {
                    "groups": ["physics"],
                    "gpuEquivalents": 2,
                    "priority": 100,
                    "resources": {
                        "gpu": {"quota": 2, "limit": 4, "overQuotaWeight": 1},
                        "cpu": {"quota": 64000, "limit": 128000, "overQuotaWeight": 1},
                        "memory": {"quota": 512000, "limit": 1024000, "overQuotaWeight": 1},
                    },
                }
            },
        },
    }
    out = _helm_release("install", release, namespace, values, tmp_path)
    assert "STATUS: deployed" in out.stdout, out.stdout
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    for size in defaults["sizes"]:
        dc = api.get("DeviceClass", prefix + size["name"])
        m = size["match"]
        assert (
            dc["spec"]["selectors"][0]["cel"]["expression"]
            == DeviceMatch.of(m["attributes"], m["capacity"]).cel()
        )
    q = api.get("Queue", team)
    assert q["spec"]["parentQueue"] == parent
    assert q["spec"]["resources"]["gpu"] == {"quota": 2, "limit": 4, "overQuotaWeight": 1}
    assert q["spec"]["priority"] == 100
    assert api.get("Queue", parent)["spec"]["resources"]["memory"]["limit"] == -1
    # KAI's schema kept every field the chart rendered (a structural schema drops unknown ones).
    rendered = yaml.safe_load_all(
        helm("get", "manifest", release, "-n", namespace, kubeconfig=_admin_kubeconfig()).stdout
    )
    for doc in (d for d in rendered if d and d["kind"] == "Queue"):
        assert api.get("Queue", doc["metadata"]["name"])["spec"] == doc["spec"], doc["metadata"]["name"]
    # KAI's scheduler takes work in the rendered leaf queue: a pod of that queue is scheduled.
    api.create(kai_pod("in-queue", team), namespace)
    waits.pod_ready(api, namespace, "in-queue", timeout=60)
    pg = podgroup_of(api, namespace, "in-queue")
    assert pg["spec"]["queue"] == team
    api.delete("Pod", "in-queue", namespace, grace_period=0)
    token = api.get("Secret", "gpusessions-agent-token", namespace)["data"]["token"]

    # Upgrade: a size goes, one comes; the agent token is kept (holders already use it).
    values["sizes"] = [
        defaults["sizes"][0],
        {
            "name": "mig-2g-20gb",
            "displayName": "MIG 2g.20gb",
            "match": {"attributes": {"type": "mig", "profile": "2g.20gb"}},
        },
    ]
    _helm_release("upgrade", release, namespace, values, tmp_path)
    assert api.get_or_none("DeviceClass", prefix + "gpu-80gb") is None
    assert api.get_or_none("DeviceClass", prefix + "mig-2g-20gb") is not None
    assert api.get("Secret", "gpusessions-agent-token", namespace)["data"]["token"] == token
    settings = json.loads(
        api.get("ConfigMap", "gpusessions-hub-settings", namespace)["data"]["settings.json"]
    )
    assert [s["name"] for s in settings["sizes"]] == ["mig-1g-10gb", "mig-2g-20gb"]

    helm("uninstall", release, "-n", namespace, kubeconfig=_admin_kubeconfig())
    left = [
        ("DeviceClass", prefix + "mig-1g-10gb", None),
        ("Queue", team, None),
        ("Queue", parent, None),
        ("ClusterRole", f"gpusessions-{namespace}-hub", None),
        ("ClusterRoleBinding", f"gpusessions-{namespace}-culler", None),
        ("Role", "gpusessions-hub", namespace),
        ("Secret", "gpusessions-agent-token", namespace),
        ("ConfigMap", "gpusessions-hub-settings", namespace),
    ]
    for kind, name, ns in left:
        assert api.get_or_none(kind, name, ns) is None, f"{kind} {name} is left after helm uninstall"


HUB_CONFIG = """
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = "test-password"
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {{"admin"}}
c.JupyterHub.cleanup_servers = False
c.KubeSpawner.namespace = {namespace!r}
c.KubeSpawner.image = "quay.io/jupyterhub/singleuser:5"
c.KubeSpawner.start_timeout = 90
c.KubeSpawner.http_timeout = 60
c.GPUSessionSpawner.gpu_allocation_timeout = 60
# What z2jh makes of `hub.services.gpusessions: {{}}`: a service with the token it keeps
# in its Secret (helm/z2jh-values.yaml); chart_config.py completes it. z2jh runs
# hub.extraConfig in its own config's namespace, as here.
c.JupyterHub.services = list(c.JupyterHub.get("services", [])) + [
    {{"name": "gpusessions", "api_token": {token!r}}}
]
exec(open({chart_config!r}).read())
"""


def _audit(since: float, users: dict[str, str]) -> list[dict[str, Any]]:
    """Audit events (complete responses) of the given users since a time, tagged by role."""
    out = []
    log = ClusterPaths.default().audit_log
    for line in log.read_text().splitlines():
        ev = json.loads(line)
        who = users.get(ev["user"]["username"])
        if who is None or ev.get("stage") not in ("ResponseComplete", "ResponseStarted"):
            continue
        stamp = ev["requestReceivedTimestamp"]
        if datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() < since - 2:
            continue
        ev["who"] = who
        out.append(ev)
    return out


def _granted(api: KubeAPI, namespace: str) -> dict[tuple[str, str], set[tuple[str, str, str]]]:
    """(who, scope) -> {(group, resource, verb)} from the installed Roles and ClusterRoles."""
    out: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
    for who in ("hub", "culler"):
        for kind, name, ns, scope in (
            ("Role", f"gpusessions-{who}", namespace, "ns"),
            ("ClusterRole", f"gpusessions-{namespace}-{who}", None, "cluster"),
        ):
            rules = api.get(kind, name, ns)["rules"]
            out[(who, scope)] = {
                (g, r, v)
                for rule in rules
                for g in rule["apiGroups"]
                for r in rule["resources"]
                for v in rule["verbs"]
            }
    return out


def _used(events: list[dict[str, Any]]) -> dict[tuple[str, str], set[tuple[str, str, str]]]:
    out: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
    for ev in events:
        ref = ev.get("objectRef") or {}
        if not ref.get("resource"):
            continue  # discovery, /version
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        scope = "ns" if ref.get("namespace") else "cluster"
        out.setdefault((ev["who"], scope), set()).add((ref.get("apiGroup", ""), resource, ev["verb"]))
    return out


def _pod_is_locked_down(pod: dict[str, Any]) -> None:
    spec = pod["spec"]
    name = pod["metadata"]["name"]
    assert spec.get("automountServiceAccountToken") is False, name
    mounts = [m["mountPath"] for c in spec["containers"] for m in c.get("volumeMounts", [])]
    assert not [m for m in mounts if "serviceaccount" in m], (name, mounts)
    for c in spec["containers"]:
        ctx = {**spec.get("securityContext", {}), **c.get("securityContext", {})}
        assert ctx.get("runAsNonRoot") is True, (name, c["name"], ctx)
        assert ctx.get("runAsUser", 1) != 0, (name, c["name"])
        assert ctx.get("allowPrivilegeEscalation") is False, (name, c["name"])


def _availability(hub: Hub, token: str) -> dict[str, Any]:
    req = urllib.request.Request(
        hub.hub_api + "/gpusessions/availability", headers={"Authorization": f"token {token}"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def _start_culler(
    api: KubeAPI, namespace: str, kubeconfig: Path, port: int, log: Path
) -> subprocess.Popen[bytes]:
    """The culler as the chart's Deployment runs it: its command, its env (Secrets resolved)."""
    dep = api.get("Deployment", "gpusessions-culler", namespace)
    (ctr,) = dep["spec"]["template"]["spec"]["containers"]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
    for e in ctr["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            ref = e["valueFrom"]["secretKeyRef"]
            data = api.get("Secret", ref["name"], namespace)["data"][ref["key"]]
            env[e["name"]] = base64.b64decode(data).decode()
    assert env["JUPYTERHUB_SERVICE_URL"] == f"http://0.0.0.0:{port}"
    env["JUPYTERHUB_SERVICE_URL"] = f"http://127.0.0.1:{port}"  # loopback only here
    env["KUBECONFIG"] = str(kubeconfig)
    cmd = [sys.executable if ctr["command"][0] == "python3" else ctr["command"][0], *ctr["command"][1:]]
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


# A notebook job's notebook: quick.
QUICK = {
    "cells": [
        {
            "cell_type": "code",
            "metadata": {},
            "source": "import time\ntime.sleep(2)\nprint('ran')",
            "outputs": [],
            "execution_count": None,
        }
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}


def test_hub_and_culler_run_with_exactly_the_rights_the_chart_gives(
    api: KubeAPI, namespace: str, release: str, tmp_path: Path, cluster: Any
) -> None:
    ports = (free_port(), free_port(), free_port())  # proxy, hub, proxy API
    cport = free_port()
    _kai_queue_crd(api)
    parent, team = f"{_prefix(namespace)}parent", f"{_prefix(namespace)}team"
    values = {
        "deviceClassPrefix": _prefix(namespace),
        "hub": {"apiUrl": f"http://127.0.0.1:{ports[1]}/hub/api"},
        # With KAI: sessions in a team queue (everyone in it by default), and the picker reads
        # KAI's Queues, which needs the chart's list and watch of them.
        "kai": {
            "enabled": True,
            "parentQueue": {
                "create": True,
                "name": parent,
                "resources": {"gpu": RES, "cpu": RES, "memory": RES},
            },
            "queues": {
                team: {
                    "groups": ["physics"],
                    "resources": {
                        "gpu": {"quota": 3, "limit": 5, "overQuotaWeight": 1},
                        "cpu": RES,
                        "memory": RES,
                    },
                }
            },
            "defaultQueue": team,
        },
        # Notebook jobs: the hub's rights for Jobs, claim templates and logs, the culler's Job watch.
        "jobs": {"enabled": True, "requeueLimit": 2},
        "culler": {
            "port": cport,
            "interval": 1,
            "stoppedKeep": 4,
            "idleLimit": 40,
            "warnBefore": 36,
            "admins": ["admin"],
        },
    }
    _helm_release("install", release, namespace, values, tmp_path)
    # What z2jh creates: the hub's ServiceAccount and its Secret with the service token.
    service_token = os.urandom(16).hex()
    api.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "hub", "namespace": namespace}}
    )
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hub", "namespace": namespace},
            "stringData": {"hub.services.gpusessions.apiToken": service_token},
        }
    )
    api.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "hub", "namespace": namespace},
            "rules": Z2JH_HUB_RULES,
        }
    )
    api.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "hub", "namespace": namespace},
            "subjects": [{"kind": "ServiceAccount", "name": "hub", "namespace": namespace}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hub"},
        }
    )
    hub_kc = _sa_kubeconfig(api, namespace, "hub", tmp_path / "hub.kubeconfig")
    culler_kc = _sa_kubeconfig(api, namespace, "gpusessions-culler", tmp_path / "culler.kubeconfig")
    settings = json.loads(
        api.get("ConfigMap", "gpusessions-hub-settings", namespace)["data"]["settings.json"]
    )
    assert settings["culler"]["url"] == f"http://gpusessions-culler.{namespace}.svc:{cport}"
    settings["culler"]["url"] = f"http://127.0.0.1:{cport}"  # no cluster DNS here
    (tmp_path / "settings.json").write_text(json.dumps(settings))

    since = time.time()
    cfg = HUB_CONFIG.format(
        namespace=namespace, token=service_token, chart_config=str(ROOT / "hub_config" / "chart_config.py")
    )
    hub = start_hub(
        cfg,
        tmp_path / "hub",
        ports=ports,
        env_extra={"KUBECONFIG": str(hub_kc), "GPUSESSIONS_SETTINGS": str(tmp_path / "settings.json")},
    )
    culler = _start_culler(api, namespace, culler_kc, cport, tmp_path / "culler.log")
    try:
        size = "mig-1g-10gb"
        spawn(hub, "alice", {"profile": size})
        claim = api.get("ResourceClaim", "gpu-alice", namespace)
        assert (
            claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"]
            == f"{_prefix(namespace)}{size}"
        )
        assert claim["status"]["allocation"]
        for pod in (
            api.get("Pod", "gpu-holder-alice", namespace),
            api.get("Pod", "jupyter-alice", namespace),
        ):
            _pod_is_locked_down(pod)
        # The picker's live figures need the cluster-wide read-only rights.
        code, tok = hub.api("POST", "/users/alice/tokens", {"note": "picker"})
        assert code == 201, tok
        profiles = {p["slug"]: p for p in _availability(hub, tok["token"])["profiles"]}
        assert isinstance(profiles[size]["free"], int), profiles[size]
        # ... and the team line KAI's Queue, read with the chart's rights on Queues.
        assert profiles[size]["queue"]["kai"] == {"queue": team, "quota": 3.0, "limit": 5.0, "allocated": 0.0}
        assert claim["metadata"]["labels"]["kai.scheduler/queue"] == team
        # The culler (as its service account) warns idle alice: a patch of her claim.
        waits.wait_for(
            lambda: (
                WARNED_AT
                in (api.get("ResourceClaim", "gpu-alice", namespace)["metadata"].get("annotations") or {})
            ),
            60,
            "the culler to warn alice",
            lambda: (tmp_path / "culler.log").read_text()[-3000:],
        )
        stop(hub, "alice")
        assert api.get_or_none("ResourceClaim", "gpu-alice", namespace) is not None  # kept
        spawn(hub, "alice", {"profile": size})  # warm restart
        stop(hub, "alice")
        # The culler releases the stopped session after stoppedKeep.
        waits.wait_for(
            lambda: (
                api.get_or_none("ResourceClaim", "gpu-alice", namespace) is None
                and api.get_or_none("Pod", "gpu-holder-alice", namespace) is None
            ),
            60,
            "the culler to release alice's stopped GPU",
            lambda: (tmp_path / "culler.log").read_text()[-3000:],
        )
        # Notebook jobs: cy runs one on a GPU size with her token; she lists it, reads it and its
        # log (the local apiserver reaches no kubelet for it, but asks), and deletes it.
        home = Path(cluster.paths.homes) / namespace / "cy"
        home.mkdir(parents=True, exist_ok=True)
        (home / "quick.ipynb").write_text(json.dumps(QUICK))
        cy = user_token(hub, "cy")
        code, job = call(
            hub, cy, "POST", "/users/cy/jobs", {"name": "q", "input": "quick.ipynb", "size": size}
        )
        assert code == 201, job
        assert (job["queue"], job["priority"]) == (team, "train"), job
        path = f"/users/cy/jobs/{job['id']}"
        done = waits.wait_for(
            lambda: (j := call(hub, cy, "GET", path)[1])["state"] in ("completed", "failed") and j,
            120,
            "cy's job to end",
            lambda: str(call(hub, cy, "GET", path)) + (tmp_path / "culler.log").read_text()[-2000:],
        )
        assert done["state"] == "completed", done
        # The chart's jobs settings reached the hub (its requeue limit is the Job's backoffLimit).
        assert api.get("Job", f"nbjob-{job['id']}", namespace)["spec"]["backoffLimit"] == 2
        code, listed = call(hub, cy, "GET", "/users/cy/jobs")
        assert code == 200 and [j["id"] for j in listed["jobs"]] == [job["id"]], listed
        code, log = call(hub, cy, "GET", path + "/log")
        assert code == 200 and log["pod"], log
        # The culler watches the Jobs and their pods, and notes the pod's run time on its Job.
        waits.wait_for(
            lambda: (
                J.RUN_SECONDS
                in (api.get("Job", f"nbjob-{job['id']}", namespace)["metadata"].get("annotations") or {})
            ),
            30,
            "the culler to note the job's run time",
            lambda: (tmp_path / "culler.log").read_text()[-3000:],
        )
        assert call(hub, cy, "DELETE", path)[0] == 200
        # Schedules: cy makes a job definition (a CronJob), lists and reads it, pauses it (the
        # CronJob replaced), runs it now and deletes it; a second goes with her below.
        defs = "/users/cy/jobdefinitions"
        nightly = {"name": "nightly", "input": "quick.ipynb", "size": size, "schedule": "0 3 * * *"}
        code, d = call(hub, cy, "POST", defs, nightly)
        assert code == 201, d
        code, listed = call(hub, cy, "GET", defs)
        assert code == 200 and [x["id"] for x in listed["job_definitions"]] == [d["id"]], listed
        assert call(hub, cy, "GET", f"{defs}/{d['id']}")[0] == 200
        code, paused = call(hub, cy, "PATCH", f"{defs}/{d['id']}", {"active": False})
        assert code == 200 and paused["active"] is False, paused
        code, run = call(hub, cy, "POST", f"{defs}/{d['id']}/jobs", {})
        assert code == 201 and run["job_definition_id"] == d["id"], run
        assert call(hub, cy, "DELETE", f"{defs}/{d['id']}")[0] == 200
        waits.wait_for(
            lambda: not api.list("CronJob", namespace)["items"] and not job_objects(api, namespace)["jobs"],
            60,
            "cy's definition and its run to go",
            lambda: str(job_objects(api, namespace)),
        )
        code, d2 = call(hub, cy, "POST", defs, nightly)
        assert code == 201, d2
        # A second job goes with cy when she is deleted (her second definition too).
        code, again = call(
            hub, cy, "POST", "/users/cy/jobs", {"name": "q", "input": "quick.ipynb", "size": size}
        )
        assert code == 201, again
        code, body = hub.api("DELETE", "/users/cy")
        assert code == 204, (code, body)
        waits.wait_for(
            lambda: (
                job_objects(api, namespace)["jobs"] == [] and job_objects(api, namespace)["templates"] == []
            ),
            60,
            "cy's jobs to go",
            lambda: str(job_objects(api, namespace)),
        )
        assert api.list("CronJob", namespace)["items"] == [], "cy's definition went with her"
        # The hub releases a deleted user's GPU itself.
        spawn(hub, "bob", {"profile": size})
        # Warned in turn, bob answers "Keep my GPU" (the hub annotates his claim).
        waits.wait_for(
            lambda: (
                WARNED_AT
                in (api.get("ResourceClaim", "gpu-bob", namespace)["metadata"].get("annotations") or {})
            ),
            60,
            "the culler to warn bob",
        )
        code, tok = hub.api("POST", "/users/bob/tokens", {"note": "keep"})
        req = urllib.request.Request(
            hub.hub_api + "/gpusessions/users/bob/keep",
            data=b"{}",
            method="POST",
            headers={"Authorization": f"token {tok['token']}"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            assert json.loads(r.read())["claim"] == "gpu-bob"
        code, body = hub.api("DELETE", "/users/bob")
        assert code == 204, (code, body)
        waits.wait_for(
            lambda: api.get_or_none("ResourceClaim", "gpu-bob", namespace) is None, 60, "bob's claim to go"
        )
    finally:
        culler.terminate()
        culler.wait(15)
        hub.stop()

    hub_user = f"system:serviceaccount:{namespace}:hub"
    culler_user = f"system:serviceaccount:{namespace}:gpusessions-culler"
    events = _audit(since, {hub_user: "hub", culler_user: "culler"})
    denied = [
        (e["who"], e["verb"], e.get("objectRef"), e["responseStatus"]["code"])
        for e in events
        if e.get("responseStatus", {}).get("code") == 403
    ]
    assert not denied, f"requests the chart's roles do not allow: {denied}"
    granted, used = _granted(api, namespace), _used(events)
    for who in ("hub", "culler"):
        g_ns, g_cl = granted[(who, "ns")], granted[(who, "cluster")]
        u_ns, u_cl = used.get((who, "ns"), set()), used.get((who, "cluster"), set())
        spare = {x for x in g_ns if x not in u_ns and (who, *x) not in RECOVERY_ONLY}
        assert not spare, f"{who}: rights in its Role never used: {sorted(spare)} (used: {sorted(u_ns)})"
        spare = {
            x for x in g_cl if x not in u_cl and x not in (u_ns - g_ns) and (who, *x) not in RECOVERY_ONLY
        }
        assert not spare, (
            f"{who}: rights in its ClusterRole never used: {sorted(spare)} (used: {sorted(u_cl)})"
        )
        for rec in RECOVERY_ONLY:
            if rec[0] == who:
                assert rec[1:] in g_ns | g_cl, f"{rec} is listed as recovery-only but not granted"

    # What they cannot do (SubjectAccessReviews on the same apiserver).
    other = "kube-system"
    assert _can(api, hub_user, "create", "resourceclaims", "resource.k8s.io", namespace)
    for verb, resource, group, ns in [
        ("get", "resourceclaims", "resource.k8s.io", other),
        ("delete", "resourceclaims", "resource.k8s.io", other),
        ("create", "resourceclaims", "resource.k8s.io", other),
        ("get", "secrets", "", other),
        ("delete", "pods", "", other),
        ("get", "nodes", "", None),
        ("list", "nodes", "", None),
        ("delete", "nodes", "", None),
        ("create", "deviceclasses", "resource.k8s.io", None),
        ("delete", "resourceslices", "resource.k8s.io", None),
        ("update", "resourceclaims/status", "resource.k8s.io", namespace),
        ("create", "roles", "rbac.authorization.k8s.io", namespace),
        ("create", "pods/exec", "", namespace),
        # KAI: its Queues read-only; nothing of its PodGroups or BindRequests.
        ("get", "queues", "scheduling.run.ai", None),
        ("patch", "queues", "scheduling.run.ai", None),
        ("delete", "queues", "scheduling.run.ai", None),
        ("list", "podgroups", "scheduling.run.ai", namespace),
        ("create", "bindrequests", "scheduling.run.ai", namespace),
        # Notebook jobs: in its namespace only, and never changed in place.
        ("create", "jobs", "batch", other),
        ("list", "jobs", "batch", other),
        ("patch", "jobs", "batch", namespace),
        ("update", "jobs", "batch", namespace),
        ("create", "resourceclaimtemplates", "resource.k8s.io", other),
        ("get", "pods/log", "", other),
        ("create", "cronjobs", "batch", other),
        ("patch", "cronjobs", "batch", namespace),
        ("watch", "cronjobs", "batch", namespace),
    ]:
        assert not _can(api, hub_user, verb, resource, group, ns), f"hub may {verb} {resource} in {ns}"
    assert _can(api, hub_user, "watch", "queues", "scheduling.run.ai", None)
    assert _can(api, hub_user, "create", "jobs", "batch", namespace)
    assert _can(api, culler_user, "watch", "jobs", "batch", namespace)
    assert _can(api, culler_user, "delete", "resourceclaims", "resource.k8s.io", namespace)
    for verb, resource, group, ns in [
        ("delete", "resourceclaims", "resource.k8s.io", other),
        ("create", "resourceclaims", "resource.k8s.io", namespace),
        ("get", "secrets", "", namespace),
        ("get", "secrets", "", other),
        ("create", "pods", "", namespace),
        ("patch", "nodes", "", None),
        ("delete", "nodes", "", None),
        ("list", "resourceclaims", "resource.k8s.io", other),
        # Jobs: watched and noted on, never made or removed; nothing of their logs or templates.
        ("create", "jobs", "batch", namespace),
        ("delete", "jobs", "batch", namespace),
        ("list", "jobs", "batch", other),
        ("get", "pods/log", "", namespace),
        ("create", "resourceclaimtemplates", "resource.k8s.io", namespace),
    ]:
        assert not _can(api, culler_user, verb, resource, group, ns), f"culler may {verb} {resource} in {ns}"
    # A user's pod has no token; even the namespace's default identity may not touch claims.
    user_pod = f"system:serviceaccount:{namespace}:default"
    for verb in ("get", "list", "delete", "patch"):
        assert not _can(api, user_pod, verb, "resourceclaims", "resource.k8s.io", namespace)
    assert not _can(api, user_pod, "get", "secrets", "", namespace)
