"""The one place where the devcluster talks to the Kubernetes API.

A small synchronous JSON client over urllib3 with client-certificate auth. It
works on plain dicts so that every field of resource.k8s.io/v1 (including
sharedCounters and consumesCounters) round-trips untouched, whatever the
Python client models know.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import urllib3
import yaml

Obj = dict[str, Any]

# API group/version and plural for the kinds the devcluster and its tests use.
_KINDS: dict[str, tuple[str, str, bool]] = {
    # kind: (apiVersion, plural, namespaced)
    "Namespace": ("v1", "namespaces", False),
    "Node": ("v1", "nodes", False),
    "Pod": ("v1", "pods", True),
    "Event": ("v1", "events", True),
    "Secret": ("v1", "secrets", True),
    "ConfigMap": ("v1", "configmaps", True),
    "ServiceAccount": ("v1", "serviceaccounts", True),
    "ResourceClaim": ("resource.k8s.io/v1", "resourceclaims", True),
    "ResourceClaimTemplate": ("resource.k8s.io/v1", "resourceclaimtemplates", True),
    "ResourceSlice": ("resource.k8s.io/v1", "resourceslices", False),
    "DeviceClass": ("resource.k8s.io/v1", "deviceclasses", False),
    # An admin's device taint (DRADeviceTaintRules: alpha in 1.35, served in v1alpha3).
    "DeviceTaintRule": ("resource.k8s.io/v1alpha3", "devicetaintrules", False),
    "PriorityClass": ("scheduling.k8s.io/v1", "priorityclasses", False),
    "NetworkPolicy": ("networking.k8s.io/v1", "networkpolicies", True),
    "Role": ("rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ClusterRole": ("rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Service": ("v1", "services", True),
    "Deployment": ("apps/v1", "deployments", True),
    "Job": ("batch/v1", "jobs", True),
    "CronJob": ("batch/v1", "cronjobs", True),
    "CustomResourceDefinition": ("apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "Queue": ("scheduling.run.ai/v2", "queues", False),
    "SubjectAccessReview": ("authorization.k8s.io/v1", "subjectaccessreviews", False),
}


class ApiError(Exception):
    """A non-2xx answer from the apiserver, with its Status message."""

    def __init__(self, status: int, reason: str, message: str, body: Obj | None = None):
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}


@dataclass(frozen=True)
class Credentials:
    server: str
    ca_file: str
    cert_file: str
    key_file: str


def load_kubeconfig(path: Path) -> Credentials:
    """Read the current context of a kubeconfig that uses file-based client certificates."""
    cfg = yaml.safe_load(path.read_text())
    ctx_name = cfg["current-context"]
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
    return Credentials(
        server=cluster["server"],
        ca_file=cluster["certificate-authority"],
        cert_file=user["client-certificate"],
        key_file=user["client-key"],
    )


def resource_path(kind: str, namespace: str | None = None, name: str | None = None) -> str:
    """The REST path of a kind (collection or one object)."""
    api_version, plural, namespaced = _KINDS[kind]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if namespaced and namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    if name:
        base += f"/{name}"
    return base


class KubeAPI:
    """Thread-safe synchronous client; one instance per process is enough."""

    def __init__(self, creds: Credentials, timeout: float = 30.0):
        self.creds = creds
        ctx = ssl.create_default_context(cafile=creds.ca_file)
        ctx.load_cert_chain(creds.cert_file, creds.key_file)
        self._pool = urllib3.PoolManager(
            num_pools=4, maxsize=16, ssl_context=ctx, timeout=urllib3.Timeout(connect=5, read=timeout)
        )

    @classmethod
    def from_kubeconfig(cls, path: Path, timeout: float = 30.0) -> KubeAPI:
        return cls(load_kubeconfig(path), timeout)

    # -- raw requests -------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Any:
        url = self.creds.server + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        kwargs: dict[str, Any] = {}
        if timeout is not None:
            kwargs["timeout"] = urllib3.Timeout(connect=5, read=timeout)
        resp = self._pool.request(method, url, body=data, headers=headers, retries=False, **kwargs)
        payload: Any = None
        if resp.data:
            try:
                payload = json.loads(resp.data)
            except ValueError:
                payload = {"message": resp.data.decode(errors="replace")}
        if resp.status >= 400:
            p = payload if isinstance(payload, dict) else {}
            raise ApiError(resp.status, str(p.get("reason", "")), str(p.get("message", payload)), p)
        return payload

    # -- typed helpers on dicts ----------------------------------------
    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        return self.request("GET", resource_path(kind, namespace, name))

    def get_or_none(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        try:
            return self.get(kind, name, namespace)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def pod_log(self, name: str, namespace: str, **query: Any) -> str:
        """`kubectl logs`: GET pods/<name>/log (container, tailLines, previous, limitBytes, ...),
        which the apiserver asks of the pod's node's kubelet; the text as it comes."""
        url = self.creds.server + resource_path("Pod", namespace, name) + "/log"
        if query:
            url += "?" + urlencode(
                {k: str(v).lower() if isinstance(v, bool) else v for k, v in query.items()}
            )
        resp = self._pool.request("GET", url, retries=False)
        text = resp.data.decode(errors="replace")
        if resp.status >= 400:
            try:
                p = json.loads(text)
            except ValueError:
                p = {"message": text}
            raise ApiError(resp.status, str(p.get("reason", "")), str(p.get("message", text)), p)
        return text

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Obj:
        q = {"labelSelector": label_selector, "fieldSelector": field_selector}
        return self.request("GET", resource_path(kind, namespace), query=q)

    def create(self, obj: Obj, namespace: str | None = None) -> Obj:
        ns = namespace or obj.get("metadata", {}).get("namespace")
        return self.request("POST", resource_path(obj["kind"], ns), body=obj)

    def replace(self, obj: Obj) -> Obj:
        md = obj["metadata"]
        path = resource_path(obj["kind"], md.get("namespace"), md["name"])
        return self.request("PUT", path, body=obj)

    def apply(self, obj: Obj) -> Obj:
        """Create, or update an existing object to `obj` (keeping its resourceVersion)."""
        md = obj["metadata"]
        try:
            return self.create(obj)
        except ApiError as e:
            if e.status != 409:
                raise
        current = self.get(obj["kind"], md["name"], md.get("namespace"))
        merged = dict(obj)
        merged["metadata"] = {**md, "resourceVersion": current["metadata"]["resourceVersion"]}
        return self.replace(merged)

    def patch(
        self,
        kind: str,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        subresource: str | None = None,
        patch_type: str = "merge",
    ) -> Obj:
        path = resource_path(kind, namespace, name)
        if subresource:
            path += "/" + subresource
        ctype = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
            "json": "application/json-patch+json",
        }[patch_type]
        return self.request("PATCH", path, body=patch, content_type=ctype)

    def delete(
        self,
        kind: str,
        name: str,
        namespace: str | None = None,
        grace_period: int | None = None,
        uid: str | None = None,
        ignore_missing: bool = True,
    ) -> Obj | None:
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            return self.request("DELETE", resource_path(kind, namespace, name), body=body)
        except ApiError as e:
            if ignore_missing and e.status == 404:
                return None
            raise

    def delete_collection(
        self,
        kind: str,
        namespace: str | None = None,
        grace_period: int | None = None,
        label_selector: str | None = None,
    ) -> None:
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        self.request(
            "DELETE", resource_path(kind, namespace), body=body, query={"labelSelector": label_selector}
        )

    def watch(
        self,
        kind: str,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> Iterator[tuple[str, Obj]]:
        """Yield (type, object) events until the server closes the watch."""
        q = {
            "watch": "1",
            "resourceVersion": resource_version,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "timeoutSeconds": timeout_seconds,
            "allowWatchBookmarks": "true",
        }
        url = (
            self.creds.server
            + resource_path(kind, namespace)
            + "?"
            + urlencode({k: v for k, v in q.items() if v is not None})
        )
        resp = self._pool.request(
            "GET",
            url,
            preload_content=False,
            retries=False,
            timeout=urllib3.Timeout(connect=5, read=timeout_seconds + 30),
        )
        try:
            if resp.status >= 400:
                raise ApiError(resp.status, "", resp.read().decode(errors="replace"))
            buf = b""
            for chunk in resp.stream(64 * 1024):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        ev = json.loads(line)
                        yield ev["type"], ev["object"]
        finally:
            resp.release_conn()
