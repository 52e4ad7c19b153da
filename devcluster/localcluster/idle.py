"""A process that does nothing until it is told to stop.

The runtime runs it for holder pods until the GPU agent exists, so that a
holder has a real process whose death the runtime can observe.
"""

from __future__ import annotations

import signal
import sys
import time


def main() -> int:
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    print("idle: holding", flush=True)
    while not stop:
        time.sleep(0.5)
    print("idle: stopping", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
