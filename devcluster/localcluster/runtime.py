"""The process runtime of the simulated GPU nodes: `python -m localcluster.runtime`.

Two parts, one process: the kubelet stand-in (`kubelet`: nodes and pods) and
the fake NVIDIA DRA driver it drives (`fakedriver`: DeviceClasses,
ResourceSlices and the fake NVML's files).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from .kubeapi import KubeAPI
from .kubelet import IPAllocator, Runtime, now_iso
from .paths import SHAPES_DIR, ClusterPaths
from .shapes import load_shape

__all__ = ["IPAllocator", "Runtime", "main", "now_iso"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="devcluster process runtime (kubelet stand-in)")
    ap.add_argument("--shape", required=True)
    ap.add_argument("--kubeconfig", required=True, type=Path)
    ap.add_argument(
        "--kubelet-port", type=int, default=0, help="the nodes' kubelet API port on their addresses (0: none)"
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    paths = ClusterPaths.default()
    shape = load_shape(args.shape, SHAPES_DIR)
    api = KubeAPI.from_kubeconfig(args.kubeconfig)
    Runtime(api, shape, paths, args.kubelet_port).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
