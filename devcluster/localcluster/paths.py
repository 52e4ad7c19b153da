"""Where the devcluster keeps its files (all outside git, under .cache/devcluster)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHAPES_DIR = REPO_ROOT / "devcluster" / "shapes"


@dataclass(frozen=True)
class ClusterPaths:
    root: Path
    bin_dir: Path | None = None  # defaults to DEVCLUSTER_BIN or <root>/bin

    @classmethod
    def default(cls) -> ClusterPaths:
        env = os.environ.get("DEVCLUSTER_DIR")
        return cls(Path(env) if env else REPO_ROOT / ".cache" / "devcluster")

    @property
    def bin(self) -> Path:
        if self.bin_dir is not None:
            return self.bin_dir
        return Path(os.environ.get("DEVCLUSTER_BIN", str(self.root / "bin")))

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd-data"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pod_logs(self) -> Path:
        return self.logs / "pods"

    @property
    def pods(self) -> Path:
        """Per-pod working folders (HOME of the simulated containers)."""
        return self.root / "pods"

    @property
    def homes(self) -> Path:
        """Home folders of users' notebook containers, kept across pods (as a home volume is)."""
        return self.root / "homes"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def lock(self) -> Path:
        return self.root / "lock"

    @property
    def audit_log(self) -> Path:
        """The apiserver's audit log (requests of service accounts only)."""
        return self.logs / "audit.log"

    @property
    def removed_nodes(self) -> Path:
        """Names of nodes taken out of the fleet (a fault): the runtime does not register them."""
        return self.root / "removed-nodes"

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"
