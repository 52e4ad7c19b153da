"""Command line: python -m localcluster up|down|status [--shape NAME]."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback

from .cluster import ClusterError, down, status, up
from .paths import ClusterPaths
from .shapes import ShapeError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="localcluster", description="local Kubernetes with simulated GPU nodes")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="start the cluster (or reuse a running one)")
    p_up.add_argument("--shape", default="demo", help="cluster shape name (devcluster/shapes/<name>.yaml)")
    p_up.add_argument("--port-base", type=int, default=None, help="first of 14 ports (default 16443)")
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
    except Exception as e:  # a bug or an unusual setup: one line here, the traceback in a file
        where = _save_traceback(paths, sys.argv[1:] if argv is None else argv)
        what = " ".join(f"{type(e).__name__}: {e}".split())
        print(f"devcluster: error: unexpected {what} (traceback in {where})", file=sys.stderr)
        return 1
    return 0


def _save_traceback(paths: ClusterPaths, argv: list[str]) -> str:
    """Write the current exception's traceback to the cluster's logs (or a temp file); return where."""
    text = f"{time.strftime('%Y-%m-%d %H:%M:%S')} localcluster {' '.join(argv)}\n{traceback.format_exc()}"
    try:
        paths.logs.mkdir(parents=True, exist_ok=True)
        log = paths.log("localcluster-error")
        with open(log, "a") as f:
            f.write(text)
        return str(log)
    except OSError:
        fd, name = tempfile.mkstemp(prefix="devcluster-error-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return name


if __name__ == "__main__":
    sys.exit(main())
