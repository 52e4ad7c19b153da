"""python -m gpusessions.agent: serve the holder's GPU status over HTTP."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal

from gpusessions.agent.nvml import load
from gpusessions.agent.server import AgentState, listen, make_app, start_sampling


def main(argv: list[str] | None = None) -> int:
    env = os.environ.get
    ap = argparse.ArgumentParser(prog="gpusessions.agent", description=__doc__)
    ap.add_argument("--ip", default=env("GPUSESSIONS_AGENT_IP", "0.0.0.0"))
    ap.add_argument("--port", type=int, default=int(env("GPUSESSIONS_AGENT_PORT", "9400")))
    ap.add_argument(
        "--interval",
        type=float,
        default=float(env("GPUSESSIONS_AGENT_INTERVAL", "2")),
        help="seconds between NVML samples",
    )
    ap.add_argument(
        "--busy-threshold",
        type=float,
        default=float(env("GPUSESSIONS_AGENT_BUSY_THRESHOLD", "5")),
        help="activity percent at which a device counts as busy",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    state = AgentState(
        load_nvml=load, visible=env("NVIDIA_VISIBLE_DEVICES"), busy_threshold=args.busy_threshold
    )
    token = env("GPUSESSIONS_AGENT_TOKEN") or None

    async def run() -> None:
        app = make_app(state, token, env("GPUSESSIONS_KERNELS_TOKEN") or None)
        # The pod's own IP (set where the holder hosts kernels): with loopback, one peer.
        listen(app, args.port, args.ip, frozenset(ip for ip in (env("POD_IP"),) if ip))
        start_sampling(state, args.interval)
        log = logging.getLogger("gpusessions.agent")
        if not token:
            log.warning(
                "no GPUSESSIONS_AGENT_TOKEN: anyone who reaches this port reads the status "
                "(the spawner's agent_token_secret gives the agent one by default)"
            )
        log.info(
            "serving on %s:%d (devices %s, auth %s)",
            args.ip,
            args.port,
            state.visible,
            "on" if token else "off",
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
