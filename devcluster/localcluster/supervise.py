"""Keep one control-plane component running, as the kubelet does for static pods.

    python -m localcluster.supervise --name kube-scheduler -- <command...>

On a real node the control plane runs as static pods and the kubelet starts a
component again when it exits. The local cluster has no kubelet for itself, so
each component runs under this small supervisor instead. It matters: after an
apiserver restart during a binding, kube-scheduler 1.35.4 can find its cache
inconsistent and exit on purpose ("Pod updated on a different node than
previously added to"), counting on being restarted.

Rules:
- A command that fails within `--grace` seconds of its *first* start is a
  configuration problem, not a crash: the supervisor exits with its code, so
  whoever started the cluster sees the error at once.
- Later exits are restarted after a back-off (1 s, doubling to 10 s; back to 1 s
  after a run of a minute or more). Each restart is one line in the log.
- SIGTERM or SIGINT stops the component and the supervisor; nothing restarts.
- The component gets SIGKILL if the supervisor itself dies.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

_PR_SET_PDEATHSIG = 1
BACKOFF_START = 1.0
BACKOFF_MAX = 10.0
STABLE_RUN = 60.0  # a run this long resets the back-off
GRACE = 5.0  # a first run shorter than this is a start-up failure (flags, ports, certificates)


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def next_backoff(previous: float, ran_for: float) -> float:
    """The wait before the next start, given the previous wait and how long the last run lasted."""
    if ran_for >= STABLE_RUN or previous <= 0:
        return BACKOFF_START
    return min(previous * 2, BACKOFF_MAX)


def say(name: str, msg: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"==== {stamp} devcluster-supervisor: {name} {msg}", flush=True)


def supervise(name: str, cmd: Sequence[str], grace: float) -> int:
    # Plain values, not locks: the handler runs between any two bytecodes of the loop below.
    state = {"stop": 0, "forwarded": 0}
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int) -> None:
        if state["forwarded"] or child is None or child.poll() is not None:
            return
        state["forwarded"] = signum  # once: a second signal makes Kubernetes components exit at once
        with contextlib.suppress(OSError):
            child.send_signal(signum)

    def on_signal(signum: int, _frame: object) -> None:
        state["stop"] = state["stop"] or signum
        forward(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    restarts = 0
    backoff = 0.0
    while not state["stop"]:
        started = time.monotonic()
        # Its own process group: a SIGTERM to the supervisor's group reaches the component
        # once, forwarded (Kubernetes components exit at once on a second signal).
        child = subprocess.Popen(list(cmd), preexec_fn=_die_with_parent, process_group=0)
        if state["stop"]:  # a signal that came just before `child` was set
            forward(state["stop"])
        code = child.wait()
        ran_for = time.monotonic() - started
        if state["stop"]:
            return code
        if restarts == 0 and ran_for < grace:
            say(name, f"exited with code {code} {ran_for:.1f}s after its first start; not restarting")
            return code if code != 0 else 1
        restarts += 1
        backoff = next_backoff(backoff, ran_for)
        say(
            name,
            f"exited with code {code} after {ran_for:.0f}s; starting it again in {backoff:.0f}s "
            f"(restart {restarts})",
        )
        deadline = time.monotonic() + backoff
        while not state["stop"] and time.monotonic() < deadline:
            time.sleep(0.05)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", required=True, help="the component's name, for the log")
    p.add_argument(
        "--grace",
        type=float,
        default=GRACE,
        help="a first run shorter than this is a start-up failure: exit instead of restarting",
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the component's command line")
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("no command given after --")
    return supervise(args.name, cmd, args.grace)


if __name__ == "__main__":
    sys.exit(main())
