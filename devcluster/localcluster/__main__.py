"""Command line: python -m localcluster up|down|status [--shape NAME]."""

from __future__ import annotations

import argparse
import json
import sys

from .cluster import ClusterError, down, status, up
from .paths import ClusterPaths
from .shapes import ShapeError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="localcluster", description="local Kubernetes with simulated GPU nodes")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="start the cluster (or reuse a running one)")
    p_up.add_argument("--shape", default="demo", help="cluster shape name (devcluster/shapes/<name>.yaml)")
    p_up.add_argument("--port-base", type=int, default=None, help="first of five ports (default 16443)")
    sub.add_parser("down", help="stop the cluster and every process it started")
    sub.add_parser("status", help="print the cluster's state as JSON")
    args = ap.parse_args(argv)
    paths = ClusterPaths.default()
    try:
        if args.cmd == "up":
            st = up(args.shape, args.port_base, paths)
            print(f"devcluster: API server   {st.server}")
            print(f"devcluster: kubeconfig   {paths.kubeconfig}")
            print(f"devcluster: logs         {paths.logs}/")
            print(f"devcluster: try          KUBECONFIG={paths.kubeconfig} {paths.bin}/kubectl get nodes")
        elif args.cmd == "down":
            was = down(paths)
            print("devcluster: stopped" if was else "devcluster: nothing was running")
        else:
            print(json.dumps(status(paths), indent=2))
    except (ClusterError, ShapeError) as e:
        print(f"devcluster: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("devcluster: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
