"""Command lines of the control-plane components (pure: no processes started here)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from .certs import PKI
from .paths import ClusterPaths

# The Kubernetes version the binaries are (devcluster/scripts/build.sh builds it).
KUBE_VERSION = "1.36"
# Versions the components can emulate (KEP-4330 `--emulated-version`, DEVCLUSTER_EMULATE):
# the two before it, which clusters still run.
EMULATED_VERSIONS = ("1.35", "1.34")
# Feature gates each version needs beyond its defaults. 1.36 turns on by default what
# gpusessions uses (partitionable devices, device taints, consumable capacity, extended
# resources backed by DRA, binding conditions, resource health in pod status), but not
# DeviceTaintRules (an admin's taint; NoExecute evicts), beta and off. In 1.34 and 1.35
# partitionable devices (counter sets, KEP-4815) and device taints (KEP-5055: the NVIDIA
# driver taints a failing GPU in its ResourceSlice, `gpu.nvidia.com/xid`; without the gate the
# apiserver drops a slice's taints and the scheduler ignores them) are alpha and off;
# DeviceTaintRules has a gate of its own from 1.35 (in 1.34 DRADeviceTaints covers them), left
# off when 1.36 emulates 1.35 (below).
# DRA itself, prioritized lists (firstAvailable) and the v1 API are on by default in all three.
FEATURE_GATES = {
    "1.36": "DRADeviceTaintRules=true",
    # Not DRADeviceTaintRules: with it the 1.36 scheduler watches DeviceTaintRules in
    # resource.k8s.io/v1beta2, which 1.35 does not serve, and never syncs (no pod is scheduled).
    "1.35": "DRAPartitionableDevices=true,DRADeviceTaints=true",
    "1.34": "DRAPartitionableDevices=true,DRADeviceTaints=true",
}
# The DeviceTaintRule API: resource.k8s.io/v1alpha3 (alpha, off by default; the tests' rules
# use it), and in 1.36 also its beta, resource.k8s.io/v1beta2, off by default too.
RUNTIME_CONFIG = {
    "1.36": "resource.k8s.io/v1alpha3=true,resource.k8s.io/v1beta2/devicetaintrules=true",
    "1.35": "resource.k8s.io/v1alpha3=true",
    "1.34": "resource.k8s.io/v1alpha3=true",
}


def version_flags(emulate: str | None, apiserver: bool = False) -> list[str]:
    """The feature-gate and emulation flags of a component for the version it runs as (and the
    apiserver's runtime config)."""
    if emulate is not None and emulate not in EMULATED_VERSIONS:
        raise ValueError(
            f"Kubernetes {KUBE_VERSION} binaries emulate {', '.join(EMULATED_VERSIONS)}, not {emulate!r}"
        )
    version = emulate or KUBE_VERSION
    gates = FEATURE_GATES[version]
    return [
        *([f"--emulated-version={emulate}"] if emulate else []),
        *([f"--feature-gates={gates}"] if gates else []),
        *([f"--runtime-config={RUNTIME_CONFIG[version]}"] if apiserver else []),
    ]


CONTROLLERS = (
    "resourceclaim-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    # Publishes kube-root-ca.crt in every namespace: pods' service-account volumes project it,
    # and KAI's scheduler keeps a pod pending while a ConfigMap it mounts is missing.
    "root-ca-cert-publisher",
    # Notebook jobs (batch/v1 Jobs) and their clean-up after ttlSecondsAfterFinished.
    "job-controller",
    "ttl-after-finished-controller",
    # Job definitions (schedules): CronJobs make the runs' Jobs.
    "cronjob-controller",
    # Evicts the pods of a claim whose device has a NoExecute taint (a DeviceTaintRule's),
    # with a DisruptionTarget condition (reason DeletionByDeviceTaintManager) first.
    "device-taint-eviction-controller",
)


KUBELET_OFFSET = 14  # after KAI's ports (base+5 to base+13)


@dataclass(frozen=True)
class Ports:
    apiserver: int
    etcd_client: int
    etcd_peer: int
    scheduler: int
    controller_manager: int
    # Every simulated node's kubelet API, on the node's own 127.x address (pods/log).
    kubelet: int

    @classmethod
    def from_base(cls, base: int) -> Ports:
        return cls(base, base + 1, base + 2, base + 3, base + 4, base + KUBELET_OFFSET)

    def named(self) -> dict[str, int]:
        return {
            "kube-apiserver": self.apiserver,
            "etcd (client)": self.etcd_client,
            "etcd (peer)": self.etcd_peer,
            "kube-scheduler": self.scheduler,
            "kube-controller-manager": self.controller_manager,
            "kubelets": self.kubelet,
        }


def etcd_cmd(paths: ClusterPaths, ports: Ports) -> list[str]:
    return [
        str(paths.bin / "etcd"),
        f"--data-dir={paths.etcd_data}",
        f"--listen-client-url=http://127.0.0.1:{ports.etcd_client}",
        f"--listen-peer-url=http://127.0.0.1:{ports.etcd_peer}",
    ]


def apiserver_cmd(paths: ClusterPaths, pki: PKI, ports: Ports, emulate: str | None = None) -> list[str]:
    return [
        str(paths.bin / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={pki.server_crt}",
        f"--tls-private-key-file={pki.server_key}",
        f"--client-ca-file={pki.ca_crt}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--api-audiences=https://kubernetes.default.svc.cluster.local",
        # Allocated only; nothing routes to it (no kube-proxy).
        "--service-cluster-ip-range=10.96.0.0/16",
        "--endpoint-reconciler-type=none",
        "--authorization-mode=RBAC",
        "--anonymous-auth=false",
        "--allow-privileged=true",
        # The not-ready taint is removed by the node lifecycle controller,
        # which the devcluster does not run: never add it.
        "--disable-admission-plugins=TaintNodesByCondition",
        # pods/log (kubectl logs) goes to the node's kubelet (the runtime's kubelet server) at
        # its InternalIP (127.x; a node's Hostname resolves nowhere), which must present a
        # certificate of the cluster CA; the apiserver presents its kubelet client certificate.
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-certificate-authority={pki.ca_crt}",
        f"--kubelet-client-certificate={pki.kubelet_client_crt}",
        f"--kubelet-client-key={pki.kubelet_client_key}",
        *version_flags(emulate, apiserver=True),
        "--profiling=false",
        "--max-requests-inflight=1000",
        "--max-mutating-requests-inflight=500",
        "--event-ttl=30m",
        # Requests of service accounts only (the control plane uses the admin certificate):
        # tests read it to compare what a role grants with what its holder really uses.
        f"--audit-policy-file={paths.root / 'audit-policy.yaml'}",
        f"--audit-log-path={paths.audit_log}",
        "--audit-log-format=json",
        "--audit-log-maxsize=200",
        "--audit-log-maxbackup=1",
        "--v=1",
    ]


AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts"]
- level: None
"""


def _component_common(paths: ClusterPaths, port: int, name: str, emulate: str | None) -> list[str]:
    return [
        f"--kubeconfig={paths.kubeconfig}",
        f"--authentication-kubeconfig={paths.kubeconfig}",
        f"--authorization-kubeconfig={paths.kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={paths.root / 'certs' / name}",
        "--leader-elect=false",
        *version_flags(emulate),
        "--profiling=false",
        "--v=1",
    ]


def scheduler_cmd(paths: ClusterPaths, ports: Ports, emulate: str | None = None) -> list[str]:
    return [
        str(paths.bin / "kube-scheduler"),
        *_component_common(paths, ports.scheduler, "kube-scheduler", emulate),
    ]


def controller_manager_cmd(
    paths: ClusterPaths, pki: PKI, ports: Ports, emulate: str | None = None
) -> list[str]:
    return [
        str(paths.bin / "kube-controller-manager"),
        *_component_common(paths, ports.controller_manager, "kube-controller-manager", emulate),
        f"--controllers={','.join(CONTROLLERS)}",
        f"--root-ca-file={pki.ca_crt}",
        "--use-service-account-credentials=false",
        "--concurrent-gc-syncs=5",
    ]


def token_kubeconfig_yaml(server: str, pki: PKI, user: str, token: str) -> str:
    """A kubeconfig that authenticates with a bearer token (a service account's)."""
    return _kubeconfig(server, pki, user, f"token: {token}")


def kubeconfig_yaml(server: str, pki: PKI, user: str = "devcluster-admin") -> str:
    return _kubeconfig(
        server, pki, user, f"client-certificate: {pki.admin_crt}\n    client-key: {pki.admin_key}"
    )


def _kubeconfig(server: str, pki: PKI, user: str, credentials: str) -> str:
    return f"""apiVersion: v1
kind: Config
clusters:
- name: devcluster
  cluster:
    server: {server}
    certificate-authority: {pki.ca_crt}
users:
- name: {user}
  user:
    {credentials}
contexts:
- name: devcluster
  context:
    cluster: devcluster
    user: {user}
current-context: devcluster
"""


def supervised(name: str, cmd: list[str]) -> list[str]:
    """`cmd` run under localcluster.supervise, which starts it again when it exits."""
    return [sys.executable, "-m", "localcluster.supervise", "--name", name, "--", *cmd]


def runtime_cmd(shape: str, paths: ClusterPaths, kubelet_port: int) -> list[str]:
    """The process runtime (simulated nodes and their pods, and their kubelet API)."""
    return [
        sys.executable,
        "-m",
        "localcluster.runtime",
        "--shape",
        shape,
        "--kubeconfig",
        str(paths.kubeconfig),
        "--kubelet-port",
        str(kubelet_port),
    ]
