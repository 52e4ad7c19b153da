"""python -m gpusessions.culler: the `gpusessions` JupyterHub service."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
from urllib.parse import urlparse

from gpusessions.culler.hub import HubAPI
from gpusessions.culler.kube import ClusterSide
from gpusessions.culler.policy import Policy, Rules
from gpusessions.culler.service import Culler, make_app, run_forever


def _exit_now(sig: int) -> None:
    logging.getLogger("gpusessions.culler").info("stopping (%s)", signal.Signals(sig).name)
    logging.shutdown()
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpusessions.culler")
    ap.add_argument("--interval", type=float, default=60, help="seconds between cycles")
    ap.add_argument("--stopped-keep", type=float, default=3600, help="keep a stopped server's GPU this long")
    ap.add_argument(
        "--idle-limit", type=float, default=7200, help="cull after notebook AND GPU idle this long"
    )
    ap.add_argument(
        "--stopped-keep-contended",
        type=float,
        default=300,
        help="keep a stopped server's GPU only this long while someone waits for that GPU size (0: off)",
    )
    ap.add_argument(
        "--gpu-idle-limit",
        type=float,
        default=14400,
        help="cull after the GPU alone was idle this long, even with notebook activity (0: off)",
    )
    ap.add_argument("--max-age", type=float, default=0, help="end any session this old (0: off)")
    ap.add_argument("--warn-before", type=float, default=900, help="warn this long before a cull")
    ap.add_argument("--orphan-grace", type=float, default=300, help="release orphan claims this old")
    ap.add_argument("--per-profile", default="{}", help='JSON: {"<profile slug>": {"idle_limit": 600}}')
    ap.add_argument("--dry-run", action="store_true", help="decide and log, change nothing")
    ap.add_argument(
        "--namespace",
        default="",
        help="the namespace of this hub's sessions; '*' for all namespaces (one hub per cluster only)",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        per_profile = json.loads(args.per_profile)
        rules = Rules(
            stopped_keep=args.stopped_keep,
            idle_limit=args.idle_limit,
            max_age=args.max_age,
            warn_before=args.warn_before,
            orphan_grace=args.orphan_grace,
            stopped_keep_contended=args.stopped_keep_contended,
            gpu_idle_limit=args.gpu_idle_limit,
        )
        policy = Policy(rules, per_profile, args.dry_run)
        for profile in per_profile:
            policy.for_profile(profile)
    except ValueError as e:
        ap.error(f"bad policy settings: {e}")
    api_url = os.environ["JUPYTERHUB_API_URL"]
    token = os.environ["JUPYTERHUB_API_TOKEN"]
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/gpusessions/")
    bind = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101"))

    async def run() -> None:
        # Stop at once when the hub stops us (SIGINT, then SIGTERM): a culler that lingers while
        # its cancelled watches unwind can still act on a hub that is going away. Nothing here
        # needs flushing: every decision is already in the claims' annotations.
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, _exit_now, sig)
        cluster = ClusterSide(namespace=None if args.namespace in ("", "*") else args.namespace)
        await cluster.ready()
        culler = Culler(cluster, HubAPI(api_url, token), policy, os.environ.get("GPUSESSIONS_AGENT_TOKEN"))
        make_app(culler, prefix).listen(bind.port or 80, address=bind.hostname or "127.0.0.1")
        logging.getLogger("gpusessions.culler").info(
            "culler on %s%s every %.0fs%s",
            bind.netloc,
            prefix,
            args.interval,
            " (dry run)" if args.dry_run else "",
        )
        await run_forever(culler, args.interval)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
