"""KAI Scheduler in the local cluster: its command lines, ports and cluster objects (pure).

Five components, built from KAI's source by devcluster/kai/build.sh into the
cluster's bin folder as `kai-<name>`:

- podgrouper: a PodGroup for every pod with `schedulerName: kai-scheduler`;
- scheduler: queues, quotas, fair share, reclaim and preemption; writes BindRequests;
- binder: carries out a BindRequest (the claim's allocation, then the pod's binding);
- podgroupcontroller, queuecontroller: fill the status of PodGroups and Queues.

kube-scheduler keeps running beside them for every pod that does not ask for KAI.
Ports: `base + 5` up to `base + 14` (the control plane takes `base` to `base + 4`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .paths import ClusterPaths

COMPONENTS = (
    "kai-podgrouper",
    "kai-scheduler",
    "kai-binder",
    "kai-podgroupcontroller",
    "kai-queuecontroller",
)
SCHEDULER_NAME = "kai-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
# Structured-parameters features of the DRA allocator in KAI's scheduler (with the project's
# patch, devcluster/kai/patches/): partitionable devices is alpha and off in 1.35, and so are
# device taints (with the gate the allocator skips a device the driver tainted NoSchedule, as
# kube-scheduler does; KAI's slice tracker does not apply DeviceTaintRules, see
# docs/reliability.md).
FEATURE_GATES = "DRAPartitionableDevices=true,DRADeviceTaints=true"
# How often KAI's scheduler runs a scheduling cycle (its default is 1 s).
SCHEDULE_PERIOD = "1s"
# KAI's four priority classes, as its chart installs them (deployments/kai-scheduler/templates/
# priorityclasses/): 100 and above is non-preemptible.
PRIORITY_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
# The CRDs the five components need (from deployments/kai-scheduler/crds/ in KAI's source).
CRD_FILES = (
    "scheduling.run.ai_queues.yaml",
    "scheduling.run.ai_podgroups.yaml",
    "scheduling.run.ai_bindrequests.yaml",
    "kai.scheduler_topologies.yaml",
)


@dataclass(frozen=True)
class KaiPorts:
    scheduler_metrics: int
    scheduler_plugins: int
    binder_metrics: int
    binder_probe: int
    podgrouper_metrics: int
    podgrouper_probe: int
    podgroupcontroller_metrics: int
    podgroupcontroller_probe: int
    queuecontroller_metrics: int

    @classmethod
    def from_base(cls, base: int) -> KaiPorts:
        return cls(*range(base + 5, base + 14))

    def named(self) -> dict[str, int]:
        return {f"kai ({k.replace('_', ' ')})": v for k, v in self.__dict__.items()}

    def ready_url(self, component: str) -> str:
        """An http URL that answers 200 once `component` runs: its metrics endpoint (the binder
        and the podgrouper register no health check, so their probe port answers 404)."""
        port = {
            "kai-scheduler": self.scheduler_metrics,
            "kai-binder": self.binder_metrics,
            "kai-podgrouper": self.podgrouper_metrics,
            "kai-podgroupcontroller": self.podgroupcontroller_metrics,
            "kai-queuecontroller": self.queuecontroller_metrics,
        }[component]
        return f"http://127.0.0.1:{port}/metrics"


def _addr(port: int) -> str:
    return f"127.0.0.1:{port}"


def commands(
    paths: ClusterPaths, ports: KaiPorts, schedule_period: str = SCHEDULE_PERIOD
) -> dict[str, list[str]]:
    """Each component's command line (they read the cluster's kubeconfig from KUBECONFIG)."""
    b = paths.bin
    return {
        "kai-podgrouper": [
            str(b / "kai-podgrouper"),
            f"--metrics-bind-address={_addr(ports.podgrouper_metrics)}",
            f"--health-probe-bind-address={_addr(ports.podgrouper_probe)}",
            f"--scheduler-name={SCHEDULER_NAME}",
            f"--queue-label-key={QUEUE_LABEL}",
            # Karta (generic workload grouping) needs CRDs the local cluster does not have.
            "--generic-karta-fallback=false",
        ],
        "kai-scheduler": [
            str(b / "kai-scheduler"),
            f"--scheduler-name={SCHEDULER_NAME}",
            f"--queue-label-key={QUEUE_LABEL}",
            f"--schedule-period={schedule_period}",
            f"--listen-address={_addr(ports.scheduler_metrics)}",
            f"--plugin-server-port={ports.scheduler_plugins}",
            f"--feature-gates={FEATURE_GATES}",
            # A DisruptionTarget condition on a pod before KAI deletes it (reclaim, preemption).
            "--update-pod-eviction-condition=true",
        ],
        "kai-binder": [
            str(b / "kai-binder"),
            f"--metrics-bind-address={_addr(ports.binder_metrics)}",
            f"--health-probe-bind-address={_addr(ports.binder_probe)}",
            f"--scheduler-name={SCHEDULER_NAME}",
            f"--feature-gates={FEATURE_GATES}",
        ],
        "kai-podgroupcontroller": [
            str(b / "kai-podgroupcontroller"),
            f"--metrics-bind-address={_addr(ports.podgroupcontroller_metrics)}",
            f"--health-probe-bind-address={_addr(ports.podgroupcontroller_probe)}",
            f"--scheduler-name={SCHEDULER_NAME}",
            "--enable-podgroup-webhook=false",
        ],
        "kai-queuecontroller": [
            str(b / "kai-queuecontroller"),
            f"--metrics-listen-address={_addr(ports.queuecontroller_metrics)}",
            "--enable-webhook=false",
        ],
    }


def queue(name: str, gpu: tuple[float, float], parent: str | None = None) -> dict[str, Any]:
    """A KAI Queue with explicit limits: GPU (quota, limit), CPU and memory unlimited (-1)."""
    free = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: dict[str, Any] = {
        "resources": {
            "gpu": {"quota": gpu[0], "limit": gpu[1], "overQuotaWeight": 1},
            "cpu": dict(free),
            "memory": dict(free),
        }
    }
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def demo_queues() -> list[dict[str, Any]]:
    """`make demo`'s queues: two teams under one department, parents first. GPU figures are KAI's
    (whole GPUs; MIG devices of mig.nvidia.com cost nothing in KAI): each team owns 3 of the demo
    shape's 5 whole GPUs' worth and may use 4 (a whole-GPU session needs one GPU of headroom,
    docs/queues.md)."""
    return [
        queue("research", (6, 6)),
        queue("team-a", (3, 4), parent="research"),
        queue("team-b", (3, 4), parent="research"),
    ]


def priority_classes() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": v}
        for n, v in PRIORITY_CLASSES.items()
    ]


def crds(crd_dir: Path) -> list[dict[str, Any]]:
    """KAI's CustomResourceDefinitions, read from its source (copied next to the binaries)."""
    out: list[dict[str, Any]] = []
    for name in CRD_FILES:
        path = crd_dir / name
        if not path.exists():
            raise FileNotFoundError(f"KAI's CRD {name} is missing in {crd_dir}; run 'make devcluster-build'")
        out.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return out


def crd_dir(paths: ClusterPaths) -> Path:
    return paths.bin / "kai-crds"


def binaries_missing(paths: ClusterPaths) -> list[str]:
    missing = [c for c in COMPONENTS if not (paths.bin / c).exists()]
    if not crd_dir(paths).is_dir():
        missing.append("kai-crds/")
    return missing
