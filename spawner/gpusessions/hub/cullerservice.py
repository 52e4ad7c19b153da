"""Add the culler service to a JupyterHub config (hub-managed), with the smallest scopes.

    from gpusessions.hub.cullerservice import configure_culler
    configure_culler(c, admins=["admin"], args=["--idle-limit", "7200"])

Hub config-time code: it names the culler's command (`python -m gpusessions.culler`) and
imports nothing of the culler.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from gpusessions.core import scopes
from gpusessions.core.claims import AGENT_TOKEN_SECRET


def configure_culler(
    c: Any,
    admins: list[str] | None = None,
    admin_groups: list[str] | None = None,
    args: list[str] | None = None,
    port: int = 10101,
    environment: dict[str, str] | None = None,
    agent_token: str | None = None,
    agent_token_secret: str | None = AGENT_TOKEN_SECRET,
    namespace: str | None = None,
    url: str | None = None,
    name: str = "gpusessions",
) -> None:
    """`agent_token`: what the holders' agents require, given as it is; without it, a culler
    run by the hub reads it from the Secret `agent_token_secret` in each session's namespace
    (GPUSessionSpawner.agent_token_secret, whose default is the same name; the hub makes it).
    None or "": the culler sends no token (agents without one).

    `url`: the culler runs elsewhere (the Helm chart's Deployment) at this URL; the hub only
    routes to it and grants its roles. Its token is the one z2jh generates for a
    `hub.services.<name>` entry: that entry, already in `c.JupyterHub.services`, is completed
    here rather than duplicated. Without `url` the hub runs the culler (`args`).

    `namespace`: where this hub's sessions live; by default the spawner's `namespace` from
    this config, else the hub pod's own namespace. `"*"` watches all namespaces (needed with
    KubeSpawner's per-user namespaces; then run one hub per cluster: another hub's sessions
    would look like orphans)."""
    args = list(args or [])
    if url is None and "--namespace" not in args:
        ns = namespace or _spawner_namespace(c)
        if ns:
            args += ["--namespace", ns]
    env = {"KUBECONFIG": os.environ["KUBECONFIG"]} if "KUBECONFIG" in os.environ else {}
    env.update(environment or {})
    if agent_token:
        env["GPUSESSIONS_AGENT_TOKEN"] = agent_token
    elif url is None and agent_token_secret and "--agent-token-secret" not in args:
        configured = _spawner_setting(c, "agent_token_secret")
        if agent_token_secret == AGENT_TOKEN_SECRET and isinstance(configured, str):
            agent_token_secret = configured  # the spawner's own setting, as this config has it
        if agent_token_secret:
            args += ["--agent-token-secret", agent_token_secret]
    service: dict[str, Any] = {
        "name": name,
        "oauth_client_allowed_scopes": [scopes.ADMIN],
        "oauth_no_confirm": True,
        "display": True,
    }
    if url is None:
        service["url"] = f"http://127.0.0.1:{port}"
        service["command"] = [sys.executable, "-m", "gpusessions.culler", *args]
        service["environment"] = env
    else:
        service["url"] = url
    services = [dict(s) for s in (c.JupyterHub.get("services", []) or [])]
    for existing in services:
        if existing.get("name") == name:
            existing.update(service)
            break
    else:
        services.append(service)
    c.JupyterHub.services = services
    custom = dict(c.JupyterHub.get("custom_scopes", {}) or {})
    custom[scopes.ADMIN] = {"description": scopes.ADMIN_DESCRIPTION}
    c.JupyterHub.custom_scopes = custom
    roles = list(c.JupyterHub.get("load_roles", []) or [])
    roles.append({"name": "gpusessions-culler", "scopes": list(scopes.CULLER), "services": [name]})
    roles.append(
        {
            "name": "gpusessions-admins",
            "scopes": [scopes.ADMIN],
            "users": admins or [],
            "groups": admin_groups or [],
        }
    )
    c.JupyterHub.load_roles = roles


SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _spawner_setting(c: Any, name: str) -> Any:
    """A GPUSessionSpawner setting as this config sets it (None: not set)."""
    cfg = c.get("GPUSessionSpawner") if hasattr(c, "get") else None
    if cfg is not None and hasattr(cfg, "get") and name in cfg:
        return cfg.get(name)
    return None


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
