"""gpusessions.hub.hubsetup: one settings document -> a JupyterHub config, wrong ones refused."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from traitlets.config import Config

from gpusessions.core.profiles import default_profiles
from gpusessions.hub import hubsetup

ROOT = Path(__file__).resolve().parents[2]
SIZE = {"name": "mig-1g-10gb", "displayName": "MIG 1g.10gb", "deviceClass": "gpusessions-mig-1g-10gb"}


def _doc(**over: Any) -> dict[str, Any]:
    return {"sizes": [dict(SIZE)], **over}


WRONG: list[tuple[Any, str]] = [
    ([], "top level: must be a mapping"),
    ({"sizes": [], "sizez": 1}, "unknown key(s) ['sizez']"),
    ({}, "missing key(s) ['sizes']"),
    (_doc(sizes=[{**SIZE, "name": "Bad Name"}]), "sizes[0].name: 'Bad Name' is not a valid name"),
    (_doc(sizes=[SIZE, SIZE]), "sizes[1].name: 'mig-1g-10gb' is used twice"),
    (_doc(sizes=[{**SIZE, "name": "cpu"}]), "is used twice (or reserved)"),
    (_doc(sizes=[{**SIZE, "count": "2"}]), "sizes[0].count: must be 1 to 8"),
    (_doc(sizes=[{**SIZE, "count": 9}]), "sizes[0].count: must be 1 to 8"),
    (_doc(sizes=[{**SIZE, "match": {"attributes": {"a": [1]}}}]), "sizes[0].match: attribute a must be"),
    (_doc(sizes=[{**SIZE, "match": {"capacity": {"memory": "lots"}}}]), "not a quantity"),
    (_doc(sizes=[{**SIZE, "priorityClass": "urgent"}]), "sizes[0].priorityClass"),
    (_doc(kai={"enabled": True, "queues": {}}), "kai.queues: KAI is enabled but no queue"),
    (
        _doc(kai={"enabled": True, "queues": {"a": {"groups": ["g"]}, "b": {"groups": ["g"]}}}),
        "kai.queues.b.groups: group 'g' is also in a",
    ),
    (
        _doc(kai={"enabled": True, "queues": {"a": {"groups": []}}, "defaultQueue": "z"}),
        "kai.defaultQueue: 'z' is not one of kai.queues",
    ),
    (
        _doc(kai={"enabled": True, "queues": {"a": {"groups": [], "gpuEquivalents": -1}}}),
        "gpuEquivalents",
    ),
    (_doc(holder={"onHolderLoss": "panic"}), "holder.onHolderLoss"),
    (_doc(holder={"persistKernels": "yes"}), "holder.persistKernels: must be true or false"),
    (_doc(culler={"enabled": True}), "culler: give exactly one of url (external) or args"),
    (_doc(culler={"enabled": True, "url": "http://x", "admins": "admin"}), "culler.admins"),
]


@pytest.mark.parametrize(("doc", "message"), WRONG)
def test_wrong_settings_are_refused_with_the_key(doc: Any, message: str) -> None:
    with pytest.raises(hubsetup.SettingsError) as e:
        hubsetup.check(doc)
    assert message in str(e.value)
    c = Config()
    with pytest.raises(hubsetup.SettingsError):
        hubsetup.apply(c, doc)
    assert "spawner_class" not in c.JupyterHub  # nothing was set


# What a JSON schema cannot state: rules across items, and a size's match read as a DeviceMatch.
ACROSS_ITEMS = (
    "is used twice",
    "is also in",
    "is not one of kai.queues",
    "sizes[0].match:",
    "not a quantity",
)


def test_the_schema_alone_refuses_what_check_refuses() -> None:
    """settings.schema.json is the document's one schema: any JSON Schema validator (an editor,
    CI, another tool) refuses the wrong documents that check() refuses, but for the rules across
    items that check() adds after it."""
    validator = jsonschema.Draft202012Validator(hubsetup.SCHEMA)
    for doc, message in WRONG:
        if any(m in message for m in ACROSS_ITEMS):
            continue
        assert not validator.is_valid(doc), message
    assert validator.is_valid(_doc())
    assert not validator.is_valid(_doc(kai={"enabled": True}))  # no queues at all
    assert validator.is_valid(_doc(kai={"enabled": False, "queues": "anything while KAI is off"}))


def test_schema_messages_name_the_key() -> None:
    for doc, message in [
        (_doc(sizes=[{**SIZE, "name": "ok\n"}]), "sizes[0].name: 'ok\\n' is not a valid name"),
        (_doc(sizes=[{**SIZE, "count": 2.0}]), "sizes[0].count: must be 1 to 8, not 2.0"),
        (_doc(sizes=[{**SIZE, "count": True}]), "sizes[0].count: must be 1 to 8, not True"),
        (_doc(sizes=[{**SIZE, "deviceClass": ""}]), "sizes[0].deviceClass: must not be empty"),
        (_doc(holder={"agentTokenSecret": "Bad"}), "holder.agentTokenSecret: 'Bad' is not a valid name"),
        (_doc(kai={"enabled": True}), "KAI is enabled but no queue is defined"),
        (_doc(culler={"enabled": True, "url": "u", "args": []}), "culler: give exactly one of url"),
        (_doc(culler={"enabled": True, "url": "u", "admins": [1]}), "culler.admins[0]: a list of names"),
        (_doc(sizes=[{**SIZE, "match": {"versions": {}}}]), "sizes[0].match: unknown key(s) ['versions']"),
    ]:
        with pytest.raises(hubsetup.SettingsError) as e:
            hubsetup.check(doc)
        assert message in str(e.value)


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(hubsetup.SettingsError, match="is missing: is the gpusessions chart installed"):
        hubsetup.load(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(hubsetup.SettingsError, match="is not valid JSON"):
        hubsetup.load(tmp_path / "bad.json")
    (tmp_path / "ok.json").write_text(json.dumps(_doc()))
    assert hubsetup.load(tmp_path / "ok.json")["sizes"][0]["name"] == "mig-1g-10gb"


def test_the_demo_config_offers_the_default_profiles() -> None:
    """The demo goes through hubsetup and ends with the default profiles, plus one borrowed
    (preemptible) whole GPU, its sessions in KAI queues per hub group."""
    c = Config()
    env = {"GPUSESSIONS_DEMO_PASSWORD": "x"}
    old = dict(os.environ)
    os.environ.update(env)
    try:
        runpy.run_path(str(ROOT / "hub_config" / "demo_config.py"), {"get_config": lambda: c})
    finally:
        os.environ.clear()
        os.environ.update(old)
    got = c.KubeSpawner.profile_list
    want = default_profiles()
    *got, spare = got
    assert spare["slug"] == "gpu-spare"
    assert spare["kubespawner_override"]["kai_priority_class"] == "build-preemptible"
    assert c.GPUSessionSpawner.kai_queue == {"team-a": "team-a", "team-b": "team-b"}
    assert c.GPUSessionSpawner.kai_priority_class == "build"
    assert [p["slug"] for p in got] == [p["slug"] for p in want]
    for g, w in zip(got, want, strict=True):
        wo = w.get("kubespawner_override", {})
        go = g.get("kubespawner_override", {})
        assert go.get("gpu_device_class") == wo.get("gpu_device_class")
        assert go.get("gpu_size") == wo.get("gpu_size")
    assert c.JupyterHub.spawner_class == "gpusessions"
    # Notebook jobs and their schedules are on in the demo.
    assert (c.NotebookJobs.enabled, c.NotebookJobDefinitions.enabled) == (True, True)
    (svc,) = [s for s in c.JupyterHub.services if s["name"] == "gpusessions"]
    assert svc["command"][1:3] == ["-m", "gpusessions.culler"]


def test_chart_config_loads_the_settings_file(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(_doc(culler={"enabled": True, "url": "http://culler:10101"})))
    c = Config()
    os.environ["GPUSESSIONS_SETTINGS"] = str(path)
    try:
        runpy.run_path(str(ROOT / "hub_config" / "chart_config.py"), {"get_config": lambda: c})
    finally:
        del os.environ["GPUSESSIONS_SETTINGS"]
    assert [p["slug"] for p in c.KubeSpawner.profile_list] == ["cpu", "mig-1g-10gb"]
    assert c.KubeSpawner.profile_list[0]["default"] is True


def test_jupyterhub_refuses_to_start_on_wrong_settings(tmp_path: Path) -> None:
    """A wrong settings file stops the hub at config load with the message, not later."""
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"sizes": [{**SIZE, "count": 0}]}))
    cfg = tmp_path / "jupyterhub_config.py"
    cfg.write_text(f"load_subconfig({str(ROOT / 'hub_config' / 'chart_config.py')!r})\n")
    r = subprocess.run(
        [str(Path(sys.executable).parent / "jupyterhub"), "-f", str(cfg), "--show-config"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "GPUSESSIONS_SETTINGS": str(path)},
        timeout=120,
    )
    assert r.returncode != 0
    assert "sizes[0].count: must be 1 to 8, not 0" in r.stdout + r.stderr
