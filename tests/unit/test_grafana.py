"""The chart's Grafana dashboard: a ConfigMap for Grafana's sidecar (off by default) whose every
query names only metrics we export, collected from the real expositions: a culler's /metrics
with every family present, and the hub's (JupyterHub's own metrics and ours, which JupyterHub
serves from prometheus_client's default registry)."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import jupyterhub.metrics  # noqa: F401  (registers the hub's own metrics, as the hub does)
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpusessions.culler.cycle import Culler
from gpusessions.culler.history import History
from gpusessions.culler.model import Session
from gpusessions.hub import metrics as hub_metrics
from helmtools import CHART, by_kind, template

DASHBOARD = CHART / "dashboards" / "gpusessions.json"
SUFFIXES = {
    "counter": ["_total"],
    "histogram": ["_bucket", "_sum", "_count"],
    "summary": ["_sum", "_count", ""],
}
# PromQL words that look like names.
KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "and",
    "or",
    "unless",
    "inf",
    "nan",
}


def sample_names(text: str) -> set[str]:
    """Every series name an exposition can carry (families with no sample yet included)."""
    out: set[str] = set()
    for fam in text_string_to_metric_families(text):
        out.add(fam.name)
        out.update(fam.name + s for s in SUFFIXES.get(fam.type, []))
        out.update(s.name for s in fam.samples)
    return out


def culler_exposition() -> str:
    c = Culler.__new__(Culler)
    s = Session("ns", "gpu-a", "a", "", profile="p", queue="q", allocated=True, running=True)
    c.sessions, c.cycles, c.last_cycle_seconds = [s], 3, 0.1
    c.actions, c.culls = Counter({"warn": 1}), Counter({"idle": 1})
    c.idle_gpu_seconds = {"p": 1.0}
    c.history = History()
    c.history.add(time.time(), "p", "q", held=1.0, busy=1.0, idle=1.0, kept=1.0, reclaimed=1.0)
    return c.metrics()


def hub_exposition() -> str:
    hub_metrics.GPU_WAIT.labels("p", "allocated").observe(1.0)
    hub_metrics.WAITING.labels("p").set(0)
    return generate_latest(REGISTRY).decode()


def queries(dashboard: dict[str, Any]) -> list[str]:
    out = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for p in panels:
            out.extend(t["expr"] for t in p.get("targets", []) if t.get("expr"))
            walk(p.get("panels", []))

    walk(dashboard["panels"])
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query":
            out.append(v["query"]["query"] if isinstance(v["query"], dict) else v["query"])
    return out


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression (or a label_values(...) query) reads."""
    m = re.fullmatch(r"\s*label_values\(\s*([A-Za-z_:][\w:]*)\s*,.*\)\s*", expr)
    if m:
        return {m.group(1)}
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # ranges
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)  # groupings
    names = set()
    for m in re.finditer(r"[A-Za-z_:][\w:]*", e):
        rest = e[m.end() :].lstrip()
        if rest.startswith("(") or m.group(0) in KEYWORDS:
            continue  # a function
        names.add(m.group(0))
    return names


def test_every_query_names_a_metric_we_export() -> None:
    exported = sample_names(culler_exposition()) | sample_names(hub_exposition())
    dashboard = json.loads(DASHBOARD.read_text())
    qs = queries(dashboard)
    assert len(qs) >= 15
    used: set[str] = set()
    for q in qs:
        names = metric_names(q)
        assert names, f"no metric in {q!r}"
        assert names <= exported, f"{q!r} reads {sorted(names - exported)}, which nothing exports"
        used |= names
    # What the issue asks the dashboard to show, each from its metric.
    for name in (
        "gpusessions_gpu_equivalents",  # held / busy / idle per profile and queue
        "gpusessions_gpu_hours",  # idle GPU-hours
        "gpusessions_culls_total",
        "gpusessions_culler_actions_total",  # warnings
        "jupyterhub_server_spawn_duration_seconds_bucket",  # spawn latency
        "gpusessions_gpu_wait_seconds_bucket",
        "gpusessions_held_gpus",  # waiting requests
    ):
        assert name in used, name


def test_the_check_catches_a_misspelt_metric() -> None:
    exported = sample_names(culler_exposition())
    assert metric_names('sum by (queue) (rate(gpusessions_culls_totl{reason="idle"}[5m]))') == {
        "gpusessions_culls_totl"
    }
    assert not metric_names("sum(gpusessions_culls_totl)") <= exported
    assert metric_names("label_values(gpusessions_held_gpus, queue)") == {"gpusessions_held_gpus"}


def test_the_dashboard_configmap_is_off_by_default_and_labelled_for_the_sidecar(tmp_path: Path) -> None:
    assert not [o for o in by_kind(template(tmp_path), "ConfigMap") if "grafana" in o["metadata"]["name"]]
    objs = template(
        tmp_path, {"grafana": {"dashboard": {"enabled": True, "annotations": {"grafana_folder": "GPU"}}}}
    )
    (cm,) = [o for o in by_kind(objs, "ConfigMap") if "grafana" in o["metadata"]["name"]]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    assert json.loads(cm["data"]["gpusessions.json"]) == json.loads(DASHBOARD.read_text())
