"""Run the helm binary the Makefile builds (helm-build) on the gpusessions chart."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "gpusessions"
Z2JH_VALUES = ROOT / "helm" / "z2jh-values.yaml"
HELM = Path(os.environ.get("HELM", ROOT / ".cache" / "tools" / "bin" / "helm"))


class HelmError(Exception):
    pass


def helm(*args: str, kubeconfig: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    if not HELM.exists():
        raise HelmError(f"helm is not built at {HELM}: run 'make helm-build' (make test does)")
    env = dict(os.environ)
    # Keep helm's own files out of $HOME (repository cache, registry config).
    cache = ROOT / ".cache" / "tools" / "helm-home"
    env.update(
        {
            "HELM_CACHE_HOME": str(cache / "cache"),
            "HELM_CONFIG_HOME": str(cache / "config"),
            "HELM_DATA_HOME": str(cache / "data"),
        }
    )
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    r = subprocess.run([str(HELM), *args], capture_output=True, text=True, env=env, timeout=300)
    if check and r.returncode != 0:
        raise HelmError(f"helm {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def values_file(tmp: Path, values: dict[str, Any], name: str = "values.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(values))
    return path


def template(
    tmp: Path, values: dict[str, Any] | None = None, namespace: str = "jhub", release: str = "gs"
) -> list[dict[str, Any]]:
    """The chart rendered with these values (on top of values.yaml), as objects."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    if values:
        args += ["-f", str(values_file(tmp, values))]
    out = helm(*args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def settings_of(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The hub settings document the chart renders (ConfigMap gpusessions-hub-settings)."""
    (cm,) = [o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"] == "gpusessions-hub-settings"]
    return json.loads(cm["data"]["settings.json"])  # type: ignore[no-any-return]
