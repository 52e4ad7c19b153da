"""The gpusessions Helm chart: lint, render, strict Kubernetes 1.35 schemas, value checks,
and agreement with the Python side (CEL of sizes, hub settings, names, labels, ports)."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from traitlets.config import Config

import kubeschemas
from gpusessions.core.claims import AGENT_PORT
from gpusessions.core.kernels import KERNEL_PORT
from gpusessions.core.labels import COMPONENT, MANAGED_BY, MANAGER
from gpusessions.core.scopes import ADMIN as ADMIN_SCOPE
from gpusessions.core.sizes import DeviceMatch, parse_cel
from gpusessions.hub import hubsetup
from helmtools import CHART, Z2JH_VALUES, HelmError, by_kind, helm, settings_of, template, values_file

TEAMS: dict[str, Any] = {
    "kai": {
        "enabled": True,
        "priorityClass": "build",
        "defaultQueue": "shared",
        "queues": {
            "team-a": {
                "groups": ["physics", "chemistry"],
                "gpuEquivalents": 2,
                "priority": 100,
                "resources": {
                    "gpu": {"quota": 2, "limit": 4, "overQuotaWeight": 1},
                    "cpu": {"quota": 64000, "limit": 128000, "overQuotaWeight": 1},
                    "memory": {"quota": 512000, "limit": 1024000, "overQuotaWeight": 1},
                },
            },
            "shared": {
                "groups": [],
                "gpuEquivalents": 1.5,
                "resources": {
                    "gpu": {"quota": 0, "limit": 2, "overQuotaWeight": 0.5},
                    "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                    "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                },
            },
        },
    }
}

ODD_SIZES: dict[str, Any] = {
    "sizes": [
        {
            "name": "h100-quoted",
            "displayName": "H100 'special' \\ edition",
            "count": 2,
            "default": True,
            "priorityClass": "build-preemptible",
            "persistKernels": False,
            "match": {
                "attributes": {
                    "productName": "NVIDIA H100 80GB HBM3 'x' \\ y",
                    "type": "gpu",
                    "cudaMajor": 9,
                    "migCapable": True,
                },
                "capacity": {"memory": "79Gi", "multiprocessors": "132"},
            },
        },
        {
            "name": "other-driver",
            "displayName": "Another driver",
            "match": {"driver": "gpu.example.com", "attributes": {"model": "x1"}},
        },
    ],
    "deviceClassPrefix": "",
    "cpuProfile": {"enabled": False},
}

VALUE_SETS = {
    "defaults": {},
    "teams": TEAMS,
    "odd-sizes": ODD_SIZES,
    "minimal": {"culler": {"enabled": False}, "rbac": {"create": False}, "sizes": []},
    "grafana": {"grafana": {"dashboard": {"enabled": True, "annotations": {"grafana_folder": "GPU"}}}},
    "record-on-a-volume": {
        "culler": {"record": {"persistence": {"enabled": True, "size": "2Gi", "storageClassName": "fast"}}}
    },
    "no-kernels": {
        "holder": {"persistKernels": False, "agentTokenSecret": {"create": False, "name": "mine"}}
    },
    "jobs": {
        **TEAMS,
        "jobs": {
            "enabled": True,
            "priorityClass": "build-preemptible",
            "queuePriorityClass": {"team-a": "train"},
            "requeueLimit": 1,
            "maxActiveJobs": 2,
            "maxWorkers": 2,
            "allowCpu": False,
            "ttlSecondsAfterFinished": 3600,
            "activeDeadlineSeconds": 7200,
            "schedules": {"enabled": True, "minIntervalMinutes": 60, "maxDefinitions": 2, "historyLimit": 1},
        },
    },
}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _defaults() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_lint_and_strict_schemas(name: str, tmp_path: Path) -> None:
    values = VALUE_SETS[name]
    f = values_file(tmp_path, values)
    lint = helm("lint", str(CHART), "-f", str(f), "--strict")
    assert "0 chart(s) failed" in lint.stdout, lint.stdout
    objs = template(tmp_path, values)
    assert objs
    for obj in objs:
        kind = obj["kind"]
        if kind == "Queue":
            # KAI's CRD: checked by the apiserver in tests/integration/test_chart.py.
            assert obj["apiVersion"] == "scheduling.run.ai/v2"
            continue
        try:
            kubeschemas.validate(obj)
        except kubernetes_validate.ValidationError as e:
            name = obj["metadata"]["name"]
            pytest.fail(f"{kind} {name} is not valid Kubernetes {kubeschemas.VERSIONS}: {e}")


def test_every_value_is_documented_in_the_schema() -> None:
    """Every key of values.yaml has a description in values.schema.json."""
    import json

    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(values: Any, sch: dict[str, Any], path: str) -> None:
        assert sch.get("description") or path == "", f"{path} has no description in values.schema.json"
        if isinstance(values, dict) and "properties" in sch:
            assert sch.get("additionalProperties") is False, f"{path or 'top'} accepts unknown keys"
            for k, v in values.items():
                assert k in sch["properties"], f"{path}.{k} is not in values.schema.json"
                walk(v, sch["properties"][k], f"{path}.{k}")
        elif isinstance(values, list) and values and "items" in sch:
            walk(values[0], {**sch["items"], "description": sch["description"]}, f"{path}[]")

    walk(_defaults(), schema, "")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"culer": {"enabled": False}}, "culer"),
        ({"culler": {"idleLimt": 5}}, "idleLimt"),
        ({"sizes": [{"name": "Bad_Name", "displayName": "x", "match": {"attributes": {}}}]}, "Bad_Name"),
        ({"sizes": [{"name": "x", "displayName": "x", "match": {"attributes": {"type": ["gpu"]}}}]}, "type"),
        (
            {
                "sizes": [
                    {
                        "name": "x",
                        "displayName": "x",
                        "match": {"attributes": {}, "capacity": {"memory": "lots"}},
                    }
                ]
            },
            "memory",
        ),
        ({"sizes": [{"name": "x", "displayName": "x", "count": 0, "match": {"attributes": {}}}]}, "count"),
        ({"kai": {"priorityClass": "urgent"}}, "priorityClass"),
        (
            {
                "kai": {
                    "queues": {"t": {"groups": [], "resources": {"gpu": {"quota": 1, "overQuotaWeight": 1}}}}
                }
            },
            "limit",
        ),
        ({"holder": {"onHolderLoss": "panic"}}, "onHolderLoss"),
        ({"jobs": {"enable": True}}, "enable"),
        ({"jobs": {"requeueLimit": -1}}, "requeueLimit"),
        ({"jobs": {"priorityClass": "urgent"}}, "priorityClass"),
        ({"jobs": {"maxWorkers": 9}}, "maxWorkers"),
        ({"jobs": {"schedules": {"enabled": True, "minIntervalMinutes": 0}}}, "minIntervalMinutes"),
        ({"jobs": {"schedules": {"enabled": True, "cron": "* * * * *"}}}, "cron"),
        ({"hub": {"apiUrl": "hub:8081"}}, "apiUrl"),
    ],
)
def test_values_schema_rejects_bad_values(values: dict[str, Any], expected: str, tmp_path: Path) -> None:
    with pytest.raises(HelmError) as e:
        template(tmp_path, values)
    assert "values don't meet the specifications of the schema" in str(e.value), e.value
    assert expected in str(e.value)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (
            _merge(TEAMS, {"kai": {"defaultQueue": "nobody"}}),
            'kai.defaultQueue "nobody" is not one of kai.queues',
        ),
        (
            _merge(TEAMS, {"kai": {"queues": {"shared": {"groups": ["physics"]}}}}),
            'the hub group "physics" is in two queues',
        ),
        ({"kai": {"enabled": True}}, "kai.enabled needs at least one queue"),
        (
            {"sizes": [{"name": "a", "displayName": "A", "match": {"attributes": {}}}] * 2},
            'the name "a" is used twice',
        ),
    ],
)
def test_inconsistent_values_fail_with_a_message(
    values: dict[str, Any], expected: str, tmp_path: Path
) -> None:
    with pytest.raises(HelmError) as e:
        template(tmp_path, values)
    assert expected in str(e.value)


@pytest.mark.parametrize("name", ["defaults", "odd-sizes"])
def test_device_classes_have_the_selector_the_picker_reads_back(name: str, tmp_path: Path) -> None:
    values = _merge(_defaults(), VALUE_SETS[name])
    objs = template(tmp_path, VALUE_SETS[name])
    classes = {o["metadata"]["name"]: o for o in by_kind(objs, "DeviceClass")}
    assert len(classes) == len(values["sizes"])
    for size in values["sizes"]:
        dc = classes[values["deviceClassPrefix"] + size["name"]]
        m = size["match"]
        match = DeviceMatch.of(m.get("attributes"), m.get("capacity"), m.get("driver", "gpu.nvidia.com"))
        (sel,) = dc["spec"]["selectors"]
        assert sel["cel"]["expression"] == match.cel()
        assert parse_cel(sel["cel"]["expression"]) == match
        assert dc["metadata"]["labels"]["gpusessions.io/size"] == size["name"]


def test_hub_settings_drive_the_hub_config(tmp_path: Path) -> None:
    values = _merge(VALUE_SETS["odd-sizes"], TEAMS)
    objs = template(tmp_path, values)
    settings = hubsetup.check(settings_of(objs))
    c = Config()
    hubsetup.apply(c, settings)
    profiles = c.KubeSpawner.profile_list
    assert [p["slug"] for p in profiles] == ["h100-quoted", "other-driver"]  # no CPU profile
    first = profiles[0]
    assert first["default"] is True
    assert first["kubespawner_override"] == {
        "gpu_device_class": "h100-quoted",
        "gpu_count": 2,
        "kai_priority_class": "build-preemptible",
        "persist_kernels": False,
    }
    classes = {o["metadata"]["name"] for o in by_kind(objs, "DeviceClass")}
    assert {p["kubespawner_override"]["gpu_device_class"] for p in profiles} == classes
    g = c.GPUSessionSpawner
    assert g.kai_queue == {"physics": "team-a", "chemistry": "team-a"}
    assert g.kai_default_queue == "shared"
    assert g.kai_gpu_quota == {"team-a": 2, "shared": 1.5}
    assert g.kai_priority_class == "build"
    assert g.holder_image == "gpusessions/gpusessions-holder:0.1.0"
    assert g.agent_token_secret == "gpusessions-agent-token"
    (svc,) = [s for s in c.JupyterHub.services if s["name"] == "gpusessions"]
    assert svc["url"] == "http://gpusessions-culler.jhub.svc:10101"
    assert "command" not in svc  # the chart's Deployment runs it


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_settings_meet_the_settings_schema(name: str, tmp_path: Path) -> None:
    """What the chart renders is what the hub's one schema (hub/settings.schema.json) accepts."""
    settings = settings_of(template(tmp_path, VALUE_SETS[name]))
    jsonschema.Draft202012Validator(hubsetup.SCHEMA).validate(settings)
    assert hubsetup.check(settings) == settings


def test_culler_merges_into_the_service_z2jh_declares(tmp_path: Path) -> None:
    """z2jh turns hub.services.gpusessions into a service with the token it generated."""
    c = Config()
    c.JupyterHub.services = [{"name": "gpusessions", "api_token": "from-z2jh-secret"}]
    hubsetup.apply(c, settings_of(template(tmp_path)))
    (svc,) = c.JupyterHub.services
    assert svc["api_token"] == "from-z2jh-secret"
    assert svc["oauth_client_allowed_scopes"] == [ADMIN_SCOPE]
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert roles["gpusessions-culler"]["services"] == ["gpusessions"]


def test_culler_deployment(tmp_path: Path) -> None:
    objs = template(tmp_path, {"culler": {"serviceName": "gpu-culler", "dryRun": True}}, namespace="team-ns")
    (dep,) = by_kind(objs, "Deployment")
    pod = dep["spec"]["template"]
    assert pod["metadata"]["labels"]["hub.jupyter.org/network-access-hub"] == "true"
    assert pod["spec"]["serviceAccountName"] == "gpusessions-culler"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    (ctr,) = pod["spec"]["containers"]
    assert ctr["command"][:3] == ["python3", "-m", "gpusessions.culler"]
    assert "--namespace=team-ns" in ctr["command"] and "--dry-run" in ctr["command"]
    assert "--stopped-keep-contended=300" in ctr["command"] and "--gpu-idle-limit=3600" in ctr["command"]
    env = {e["name"]: e for e in ctr["env"]}
    assert env["JUPYTERHUB_API_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "hub",
        "key": "hub.services.gpu-culler.apiToken",
    }
    assert env["JUPYTERHUB_SERVICE_PREFIX"]["value"] == "/services/gpu-culler/"
    assert env["GPUSESSIONS_AGENT_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "gpusessions-agent-token"
    (svc,) = by_kind(objs, "Service")
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert settings_of(objs)["culler"]["url"] == "http://gpusessions-culler.team-ns.svc:10101"


def _rules(objs: list[dict[str, Any]], kind: str, name_part: str) -> list[dict[str, Any]]:
    (role,) = [o for o in by_kind(objs, kind) if o["metadata"]["name"].endswith("-" + name_part)]
    return role["rules"]  # type: ignore[no-any-return]


def test_rbac_is_narrow(tmp_path: Path) -> None:
    objs = template(tmp_path)
    for kind in ("Role", "ClusterRole"):
        for role in by_kind(objs, kind):
            for rule in role["rules"]:
                for field in ("apiGroups", "resources", "verbs"):
                    assert "*" not in rule[field], (role["metadata"]["name"], rule)
                assert "resourceNames" not in rule or rule["resourceNames"]
    # Cluster-wide: read-only, and nothing of secrets, pods or nodes for the hub.
    for rule in _rules(objs, "ClusterRole", "hub"):
        assert set(rule["verbs"]) <= {"get", "list", "watch"}
        assert set(rule["resources"]) <= {"resourceslices", "resourceclaims", "deviceclasses", "queues"}
    for rule in _rules(objs, "ClusterRole", "culler"):
        # Nodes (a session whose node is gone), ResourceSlices (the admin page's fleet map).
        assert rule["resources"] in (["nodes"], ["resourceslices"]) and set(rule["verbs"]) == {
            "list",
            "watch",
        }
    assert not [r for r in _rules(objs, "ClusterRole", "hub") if "scheduling.run.ai" in r["apiGroups"]]
    # With KAI: list and watch of KAI's Queues (the picker's team line), nothing more of KAI's.
    kai = template(tmp_path, TEAMS)
    assert [r for r in _rules(kai, "ClusterRole", "hub") if "scheduling.run.ai" in r["apiGroups"]] == [
        {"apiGroups": ["scheduling.run.ai"], "resources": ["queues"], "verbs": ["list", "watch"]}
    ]
    # No kernels: no NetworkPolicies for the hub, and of Secrets only the agents' token (looked
    # up before a holder is made, made if missing).
    no_kernels = template(tmp_path, VALUE_SETS["no-kernels"])
    rules = _rules(no_kernels, "Role", "hub")
    resources = {r for rule in rules for r in rule["resources"]}
    assert resources == {"resourceclaims", "pods", "events", "secrets"}
    assert [r["verbs"] for r in rules if r["resources"] == ["secrets"]] == [["get", "create"]]
    assert not by_kind(no_kernels, "Secret")  # agentTokenSecret.create false
    minimal = template(tmp_path, VALUE_SETS["minimal"])
    assert not [
        o for o in minimal if o["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
    ]


def test_jobs_enabled_turns_jobs_on_with_exactly_their_rights(tmp_path: Path) -> None:
    """Off by default: no rights for jobs, no Job watch. On: the hub's NotebookJobs settings,
    the hub's and the culler's rules for jobs (tests/integration/test_chart.py proves each is
    used), and the culler's --jobs."""
    jobs_rules = {"batch", "resourceclaimtemplates", "pods/log"}

    def culler_command(objs: list[dict[str, Any]]) -> list[str]:
        (dep,) = by_kind(objs, "Deployment")
        return dep["spec"]["template"]["spec"]["containers"][0]["command"]  # type: ignore[no-any-return]

    off = template(tmp_path)
    for who in ("hub", "culler"):
        for rule in _rules(off, "Role", who):
            assert not (set(rule["apiGroups"]) | set(rule["resources"])) & jobs_rules, (who, rule)
    assert "--jobs" not in culler_command(off)
    assert settings_of(off)["jobs"]["enabled"] is False
    c = Config()
    hubsetup.apply(c, settings_of(off))
    assert (c.NotebookJobs.enabled, c.NotebookJobDefinitions.enabled) == (False, False)

    values = _merge(VALUE_SETS["jobs"], {"sizes": [{**_defaults()["sizes"][0], "jobPriorityClass": "build"}]})
    on = template(tmp_path, values)
    hub = _rules(on, "Role", "hub")
    assert {
        "apiGroups": ["batch"],
        "resources": ["jobs"],
        "verbs": ["get", "list", "create", "delete"],
    } in hub
    assert {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaimtemplates"],
        "verbs": ["create", "patch", "delete"],
    } in hub
    assert {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]} in hub
    # Schedules: CronJobs, and reading a definition's claim template.
    assert {
        "apiGroups": ["batch"],
        "resources": ["cronjobs"],
        "verbs": ["get", "list", "create", "update", "delete"],
    } in hub
    template_get = {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaimtemplates"]}
    template_get["verbs"] = ["get"]
    assert template_get in hub
    culler = _rules(on, "Role", "culler")
    assert {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list", "watch", "patch"]} in culler
    assert len(hub) == len(_rules(template(tmp_path, TEAMS), "Role", "hub")) + 5
    # Jobs without schedules: no rights for CronJobs, and the hub offers none.
    no_schedules = template(tmp_path, _merge(VALUE_SETS["jobs"], {"jobs": {"schedules": {"enabled": False}}}))
    assert not [r for r in _rules(no_schedules, "Role", "hub") if "cronjobs" in r["resources"]]
    assert len(_rules(no_schedules, "Role", "hub")) == len(hub) - 2
    c = Config()
    hubsetup.apply(c, hubsetup.check(settings_of(no_schedules)))
    assert (c.NotebookJobs.enabled, c.NotebookJobDefinitions.enabled) == (True, False)
    assert len(culler) == len(_rules(off, "Role", "culler")) + 1
    # Cluster-wide: nothing for jobs.
    for who in ("hub", "culler"):
        assert _rules(on, "ClusterRole", who) == _rules(template(tmp_path, TEAMS), "ClusterRole", who)
    assert "--jobs" in culler_command(on)
    c = Config()
    hubsetup.apply(c, hubsetup.check(settings_of(on)))
    j = c.NotebookJobs
    assert (j.enabled, j.priority_class, j.queue_priority_class) == (
        True,
        "build-preemptible",
        {"team-a": "train"},
    )
    assert (j.requeue_limit, j.max_active_jobs, j.max_workers, j.allow_cpu) == (1, 2, 2, False)
    assert (j.ttl_seconds_after_finished, j.active_deadline_seconds) == (3600, 7200)
    d = c.NotebookJobDefinitions
    assert (d.enabled, d.min_interval_minutes, d.max_definitions, d.history_limit) == (True, 60, 2, 1)
    (size,) = [p for p in c.KubeSpawner.profile_list if p["slug"] == values["sizes"][0]["name"]]
    assert size["kubespawner_override"]["job_priority_class"] == "build"


def test_agent_token_is_random_per_render(tmp_path: Path) -> None:
    a = by_kind(template(tmp_path), "Secret")[0]["data"]["token"]
    b = by_kind(template(tmp_path), "Secret")[0]["data"]["token"]
    assert a != b and len(a) >= 64  # base64 of 48 characters


def test_z2jh_values_fit_the_chart(tmp_path: Path) -> None:
    z2jh = yaml.safe_load(Z2JH_VALUES.read_text())
    objs = template(tmp_path)
    defaults = _defaults()
    (vol,) = z2jh["hub"]["extraVolumes"]
    assert vol["configMap"]["name"] == "gpusessions-hub-settings"
    assert {o["metadata"]["name"] for o in by_kind(objs, "ConfigMap")} == {"gpusessions-hub-settings"}
    (mount,) = z2jh["hub"]["extraVolumeMounts"]
    chart_config = (CHART.parents[1] / "hub_config" / "chart_config.py").read_text()
    assert f"{mount['mountPath']}/settings.json" in chart_config
    assert defaults["culler"]["serviceName"] in z2jh["hub"]["services"]
    # extraConfig runs the file the hub image installs (in z2jh's own config namespace).
    dockerfile = (CHART.parents[1] / "images" / "hub" / "Dockerfile").read_text()
    (installed,) = re.findall(r"^COPY hub_config/chart_config.py (\S+)$", dockerfile, re.M)
    assert f'exec(open("{installed}").read())' in z2jh["hub"]["extraConfig"]["gpusessions"]
    assert z2jh["scheduling"]["userScheduler"]["enabled"] is False
    (egress,) = z2jh["singleuser"]["networkPolicy"]["egress"]
    assert egress["to"][0]["podSelector"]["matchLabels"] == {MANAGED_BY: MANAGER, COMPONENT: "holder"}
    # the kernel gateway, and the GPU agent for the GPU panel in JupyterLab
    assert egress["ports"] == [{"port": p, "protocol": "TCP"} for p in (KERNEL_PORT, AGENT_PORT)]
    assert defaults["hub"]["serviceAccountName"] == "hub"  # z2jh's default name
    assert AGENT_PORT != KERNEL_PORT


def test_values_yaml_matches_the_spawner_defaults() -> None:
    """The chart's documented defaults say what the spawner does by default."""
    from gpusessions.hub.spawner import GPUSessionSpawner as S

    defaults = _defaults()
    assert defaults["holder"]["persistKernels"] is S.persist_kernels.default_value
    assert defaults["holder"]["keepGpuOnStop"] is S.keep_gpu_on_stop.default_value
    assert defaults["holder"]["onHolderLoss"] == S.on_holder_loss.default_value
    assert defaults["kai"]["priorityClass"] == S.kai_priority_class.default_value
    assert defaults["kai"]["schedulerName"] == S.kai_scheduler_name.default_value
    from gpusessions.hub.hubsetup import JOB_SETTINGS
    from gpusessions.hub.jobs import NotebookJobs

    hub_defaults = NotebookJobs()
    for key, trait in JOB_SETTINGS.items():
        value = getattr(hub_defaults, trait)
        assert defaults["jobs"][key] == value, (key, defaults["jobs"][key], value)
    from gpusessions.hub.hubsetup import SCHEDULE_SETTINGS
    from gpusessions.hub.jobdefs import NotebookJobDefinitions

    definition_defaults = NotebookJobDefinitions()
    assert defaults["jobs"]["schedules"]["enabled"] is definition_defaults.enabled
    for key, trait in SCHEDULE_SETTINGS.items():
        value = getattr(definition_defaults, trait)
        assert defaults["jobs"]["schedules"][key] == value, (key, defaults["jobs"]["schedules"][key], value)


def test_chart_yaml() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "gpusessions"
    assert chart["kubeVersion"].startswith(">=1.34")
    r = helm("show", "chart", str(CHART))
    assert "name: gpusessions" in r.stdout


def test_the_culler_keeps_its_record_on_a_volume(tmp_path: Path) -> None:
    """The record is written under a read-only root: an emptyDir by default, a claim when asked."""
    for persist in (False, True):
        values = {"culler": {"record": {"persistence": {"enabled": persist}}}}
        objs = template(tmp_path, values)
        dep = next(o for o in by_kind(objs, "Deployment") if o["metadata"]["name"] == "gpusessions-culler")
        pod = dep["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert "--history-file=/var/lib/gpusessions/history.json" in container["command"]
        assert container["volumeMounts"] == [{"name": "record", "mountPath": "/var/lib/gpusessions"}]
        (vol,) = pod["volumes"]
        claims = by_kind(objs, "PersistentVolumeClaim")
        if persist:
            assert vol["persistentVolumeClaim"] == {"claimName": "gpusessions-culler-record"}
            assert [c["metadata"]["name"] for c in claims] == ["gpusessions-culler-record"]
        else:
            assert "emptyDir" in vol and claims == []
