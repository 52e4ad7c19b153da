"""Add the culler service to a JupyterHub config (hub-managed), with the smallest scopes.

from gpusessions.culler.hubconfig import configure_culler
configure_culler(c, admins=["admin"], args=["--idle-limit", "7200"])
"""

from __future__ import annotations

import os
import sys
from typing import Any

ADMIN_SCOPE = "custom:gpusessions:admin"
# What the culler's own token may do: list users and their servers with activity, stop servers.
CULLER_SCOPES = ["list:users", "read:users:name", "read:users:activity", "read:servers", "servers"]


def configure_culler(
    c: Any,
    admins: list[str] | None = None,
    admin_groups: list[str] | None = None,
    args: list[str] | None = None,
    port: int = 10101,
    environment: dict[str, str] | None = None,
    agent_token: str | None = None,
    namespace: str | None = None,
) -> None:
    """`agent_token`: what the holders' agents require (GPUSessionSpawner.agent_token_secret).

    `namespace`: where this hub's sessions live; by default the spawner's `namespace` from
    this config, else the hub pod's own namespace. `"*"` watches all namespaces (needed with
    KubeSpawner's per-user namespaces; then run one hub per cluster: another hub's sessions
    would look like orphans)."""
    args = list(args or [])
    if "--namespace" not in args:
        ns = namespace or _spawner_namespace(c)
        if ns:
            args += ["--namespace", ns]
    env = {"KUBECONFIG": os.environ["KUBECONFIG"]} if "KUBECONFIG" in os.environ else {}
    env.update(environment or {})
    if agent_token:
        env["GPUSESSIONS_AGENT_TOKEN"] = agent_token
    services = list(c.JupyterHub.get("services", []) or [])
    services.append(
        {
            "name": "gpusessions",
            "url": f"http://127.0.0.1:{port}",
            "command": [sys.executable, "-m", "gpusessions.culler", *args],
            "environment": env,
            "oauth_client_allowed_scopes": [ADMIN_SCOPE],
            "oauth_no_confirm": True,
            "display": True,
        }
    )
    c.JupyterHub.services = services
    scopes = dict(c.JupyterHub.get("custom_scopes", {}) or {})
    scopes[ADMIN_SCOPE] = {
        "description": "See every held GPU and release or keep it (gpusessions admin page)."
    }
    c.JupyterHub.custom_scopes = scopes
    roles = list(c.JupyterHub.get("load_roles", []) or [])
    roles.append({"name": "gpusessions-culler", "scopes": CULLER_SCOPES, "services": ["gpusessions"]})
    roles.append(
        {
            "name": "gpusessions-admins",
            "scopes": [ADMIN_SCOPE],
            "users": admins or [],
            "groups": admin_groups or [],
        }
    )
    c.JupyterHub.load_roles = roles


SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _spawner_namespace(c: Any) -> str | None:
    """The namespace the spawner uses, as KubeSpawner decides it (config, then the pod's own)."""
    for section in ("GPUSessionSpawner", "KubeSpawner"):
        cfg = c.get(section) if hasattr(c, "get") else None
        ns = cfg.get("namespace") if cfg is not None and hasattr(cfg, "get") else None
        if isinstance(ns, str) and ns:
            return ns
        if cfg is not None and cfg.get("enable_user_namespaces"):
            return "*"
    try:
        with open(SA_NAMESPACE) as f:
            return f.read().strip() or None
    except OSError:
        return None
