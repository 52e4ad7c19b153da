"""Benchmark: idle reclaim: one session trace replayed with no culling, hub-activity culling, our culler.

    .venv/bin/python tests/bench/bench_idle.py [--profile workday|notebook] [--trace FILE]
        [--write-trace FILE] [--users N] [--hours H] [--slots N] [--scale S] [--seed N]
        [--policies none,hub-activity,gpusessions,park] [--park-variant NAME:FIELD=HOURS,...]
        [--json out.json]

The trace (idletrace.py: every parameter and its default there) is generated from a profile,
`workday` (8 users, 8 hours, 3 MIG slices, 20 s per simulated hour) or `notebook` (calibrated
to a production notebook service's published figures: 36 users, 48 hours, 7 MIG slices, 6 s
per simulated hour), or read from a JSON file (`--trace`; `--write-trace` writes the one
replayed, `--only-write` stops there). The same trace is then replayed, time-compressed
(`--scale` real seconds per simulated hour), three times through a real JupyterHub +
configurable-http-proxy + GPUSessionSpawner on the local cluster (shape small), one hub per
policy, in this order:

- (a) none: no culling at all;
- (b) hub-activity: jupyterhub-idle-culler itself (PyPI `jupyterhub-idle-culler`) as a hub
  service: it reads only the server's `last_activity` and stops servers idle past `--timeout`,
  with no GPU awareness and no warning;
- (c) gpusessions: our culler (`python -m gpusessions.culler`, via `configure_culler`), which
  reads GPU activity from each holder's agent (on the simulated NVML) as well;
- (d) park: our culler with parking on (issue 27): the users' kernels live in the holder
  (`persist_kernels`, `park_kernels`), which parks them when it goes, so the culler applies its
  parking rules (the claims say they park; `--park-*`, policy.PARKING). Each user opens a
  notebook at every start: the first builds a small state in its kernel (an 8 MiB numpy array
  and a number), every later one checks it, after the restore a cull's park makes: a real
  park and restore, through the hub's proxy; the seconds from the server's ready to the state
  checked count in the user's waiting at their real length.

(a) and (b) model the usual setup, a GPU that goes when the server stops (the profile's
`keep_gpu_on_stop` is off); (c) runs gpusessions' defaults (a stopped server's GPU is kept for
`--stopped-keep`, or after `--stopped-keep-contended` while another user waits, then released
by the culler; `--gpu-idle-limit` culls a session whose GPU alone stays idle behind an open tab).

Capacity is scarce on purpose: the bench's only profile may use `--slots` fixed MIG slices of
GPU 0 (3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb in that order of preference... whichever the
scheduler picks), so a user who arrives while they are all held waits (the spawner waits for
the allocation; nobody gives up).

What the bench does for the users: a user "at work" makes hub activity (POST
/hub/api/users/<name>/activity every `activity_every` simulated hours, as the singleuser
server's activity reports would) and makes their GPU busy through the simulated NVML's load
file (activity 90 %, one compute process); an idle user makes neither, unless they left a tab
open (hub activity goes on, the GPU is idle); a long GPU job keeps the GPU busy with no hub
activity. A user whose server was culled notices at their next phase of GPU work and starts
it again (that wait counts as waiting).

Measured per policy, over the trace's span only (after it the replay stops):
- GPU-hours held idle: a claim is allocated to the user while they do no GPU work (their
  server stopped or culled while the claim is kept counts too); sampled twice a second;
- waiting: from wanting a GPU (a session starts, or work resumes after a cull) to the server
  being ready; a wait still open when the trace ends counts up to the end; "waiting in all"
  counts the notebook's start after the allocation at its real length (seconds), which the
  compression would otherwise inflate to a good part of an hour per start;
- warnings shown (by the culler's claim annotations) and "Keep my GPU" clicks: a user at the
  notebook (a `work` or `cpu` phase) who is warned answers with Keep, as the JupyterLab notice
  offers; a user away does not, but one who comes back to the notebook (any phase but `pause`)
  while a warning stands answers it before doing anything else (the notice stands until
  answered); a Keep the hub refuses because the culler's stop has begun means the server is
  going: the user starts it again instead of working on it;
- lost work: GPU jobs culled while busy (count, and the GPU-hours the job had run);
- sessions whose state was lost: in (b) and (c) every cull (the kernels end with the server);
  in (d) a later start that did not find the state, and every park the holder recorded as
  incomplete (failed or over its time).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "spawner"), str(ROOT / "devcluster"), str(ROOT)]

from localcluster import cluster as lc  # noqa: E402
from localcluster.hubproc import Hub, HubError, free_port, start_hub  # noqa: E402
from localcluster.kubeapi import KubeAPI  # noqa: E402
from localcluster.paths import ClusterPaths  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import idletrace  # noqa: E402
from idletrace import PUBLISHED, Session, TraceError, TraceParams  # noqa: E402

from gpusessions.core.labels import KEEP_UNTIL, WARNED_AT  # noqa: E402
from gpusessions.culler.policy import PARKING  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "integration"))
from kerneltools import execute  # noqa: E402

POLICIES = ("none", "hub-activity", "gpusessions", "park")
LABEL = {
    "none": "(a) no culling",
    "hub-activity": "(b) hub-activity culling",
    "gpusessions": "(c) our culler",
    "park": "(d) our culler, parking",
}
# (d): the user's kernel state, built at the first start and checked at every later one (the
# holder parks it when it goes, the next start restores it): a small state, real park and restore.
PARK_NOTEBOOK = "bench.ipynb"
PARK_STATE = (
    "import numpy as np\n"
    "bench_arr = np.arange(1 << 20, dtype=np.float64)\n"  # 8 MiB
    "bench_answer = 42\n"
    "print('built')"
)
PARK_CHECK = (
    "g = globals()\n"
    "ok = g.get('bench_answer') == 42 and 'bench_arr' in g and float(bench_arr[-1]) == (1 << 20) - 1\n"
    "print('kept' if ok else 'lost')"
)


# --- the hubs ------------------------------------------------------------------------------
HUB = """
from gpusessions.hub.handlers import configure_hub

c.JupyterHub.spawner_class = "gpusessions"
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.JupyterHub.cleanup_servers = False
c.KubeSpawner.namespace = {namespace!r}
c.KubeSpawner.image = "quay.io/jupyterhub/singleuser:5"
c.KubeSpawner.start_timeout = 3600
c.KubeSpawner.http_timeout = 120
c.GPUSessionSpawner.gpu_allocation_timeout = 3600
c.GPUSessionSpawner.persist_kernels = {persist!r}
c.GPUSessionSpawner.park_kernels = {persist!r}
c.GPUSessionSpawner.gpu_keep_extension = {keep_extension!r}
c.GPUSessionSpawner.agent_interval = {agent_interval!r}
c.KubeSpawner.profile_list = [{{
    "display_name": "Bench MIG slice", "slug": "bench-gpu", "default": True,
    "kubespawner_override": {{
        "gpu_device_class": "mig.nvidia.com",
        "gpu_selectors": [{selector!r}],
        "keep_gpu_on_stop": {keep!r},
    }},
}}]
configure_hub(c)
"""
IDLE_CULLER = """
import sys
c.JupyterHub.services.append({{
    "name": "idle-culler",
    "command": [sys.executable, "-m", "jupyterhub_idle_culler",
                "--timeout={timeout}", "--cull-every={every}"],
}})
c.JupyterHub.load_roles.append({{
    "name": "idle-culler",
    "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
    "services": ["idle-culler"],
}})
"""
JOBS = """
# Notebook jobs (docs/jobs.md) need KAI: every session and job of this hub is in one team queue.
c.GPUSessionSpawner.kai_queue = {queue!r}
c.NotebookJobs.enabled = True
"""
OUR_CULLER = """
from gpusessions.hub.cullerservice import configure_culler
configure_culler(c, admins=[], port={port}, args={args!r})
"""


@dataclass
class Limits:
    """Culler settings in simulated hours (scaled to real seconds when the hubs start)."""

    idle: float = 1.0  # (b) --timeout and (c) --idle-limit: z2jh's cull.timeout default is 1 h
    cull_every: float = 1 / 6  # (b) --cull-every: z2jh's default 10 min
    interval: float = 1 / 60  # (c) --interval: our default, 1 min
    warn_before: float = 0.25  # (c) --warn-before: our default, 15 min
    stopped_keep: float = 1.0  # (c) --stopped-keep: our default, 1 h
    stopped_keep_contended: float = 300 / 3600  # (c) --stopped-keep-contended: our default, 5 min
    gpu_idle: float = 1.0  # (c) --gpu-idle-limit: our default, 1 h
    gpu_idle_contended: float = 1 / 30  # (c) --gpu-idle-limit-contended: our default, 2 min
    keep_contended: float = 1 / 12  # (c) --keep-contended: our default, 5 min
    keep_extension: float = 4.0  # "Keep my GPU" holds the culler off this long: the spawner's default
    # (d): the culler's rules for sessions that park (--park-*), our defaults (policy.PARKING)
    park_gpu_idle: float = PARKING["gpu_idle_limit"] / 3600
    park_idle: float = PARKING["idle_limit"] / 3600
    park_stopped_keep: float = PARKING["stopped_keep"] / 3600
    park_warn_before: float = PARKING["warn_before"] / 3600
    park_keep_limit: float = PARKING["keep_limit"] / 3600
    park_keep_contended: float = PARKING["keep_contended"] / 3600


def base_policy(policy: str) -> str:
    """none, hub-activity, gpusessions or park (a variant "gpusessions:NAME" is our culler,
    "park:NAME" our culler with parking)."""
    return policy.split(":", 1)[0]


def label(policy: str) -> str:
    if ":" in policy:
        return f"({'d' if base_policy(policy) == 'park' else 'c'}) {policy.split(':', 1)[1]}"
    return LABEL[policy]


def hub_config(
    policy: str,
    namespace: str,
    selector: str,
    limits: Limits,
    scale: float,
    agent_interval: float = 0.0,
    queue: str = "",
) -> str:
    policy = base_policy(policy)
    cfg = HUB.format(
        namespace=namespace,
        selector=selector,
        keep=policy in ("gpusessions", "park"),
        persist=policy == "park",
        keep_extension=limits.keep_extension * scale,
        agent_interval=agent_interval,
    )
    if queue:
        cfg += JOBS.format(queue=queue)
    if policy == "hub-activity":
        timeout = max(1, round(limits.idle * scale))
        every = max(1, round(limits.cull_every * scale))
        cfg += IDLE_CULLER.format(timeout=timeout, every=every)
    elif policy in ("gpusessions", "park"):
        args = [
            "--interval",
            f"{max(0.25, limits.interval * scale):g}",
            "--idle-limit",
            f"{limits.idle * scale:g}",
            "--warn-before",
            f"{limits.warn_before * scale:g}",
            "--stopped-keep",
            f"{limits.stopped_keep * scale:g}",
            "--stopped-keep-contended",
            f"{limits.stopped_keep_contended * scale:g}",
            "--gpu-idle-limit",
            f"{limits.gpu_idle * scale:g}",
            "--gpu-idle-limit-contended",
            f"{limits.gpu_idle_contended * scale:g}",
            "--keep-contended",
            f"{limits.keep_contended * scale:g}",
            "--orphan-grace",
            "3",
        ]
        if policy == "park":  # the claims say they park: the culler's parking rules apply
            args += [
                "--park-gpu-idle-limit",
                f"{limits.park_gpu_idle * scale:g}",
                "--park-idle-limit",
                f"{limits.park_idle * scale:g}",
                "--park-stopped-keep",
                f"{limits.park_stopped_keep * scale:g}",
                "--park-warn-before",
                f"{limits.park_warn_before * scale:g}",
                "--park-keep-limit",
                f"{limits.park_keep_limit * scale:g}",
                "--park-keep-contended",
                f"{limits.park_keep_contended * scale:g}",
            ]
        cfg += OUR_CULLER.format(port=free_port(), args=args)
    return cfg


# --- the simulated NVML's load file, shared by concurrent replays --------------------------------
class LoadFile:
    """The simulated NVML's load file (per device UUID), written by several replays at once (in
    this process and in others): each replay owns the UUIDs of its own slots and replaces only
    their entries, under an exclusive lock, with an atomic rename."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock_path = path.with_suffix(".bench.lock")
        self.mutex = threading.Lock()

    def update(self, owned: set[str], load: dict[str, Any]) -> None:
        import fcntl

        with self.mutex, open(self.lock_path, "a") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            try:
                try:
                    cur = json.loads(self.path.read_text() or "{}")
                except (OSError, ValueError):
                    cur = {}
                cur = {k: v for k, v in cur.items() if k not in owned}
                cur.update(load)
                tmp = self.path.with_suffix(f".bench.{os.getpid()}.tmp")
                tmp.write_text(json.dumps(cur, sort_keys=True))
                os.replace(tmp, self.path)
            finally:
                fcntl.flock(lk, fcntl.LOCK_UN)


# --- the replay ------------------------------------------------------------------------------
@dataclass
class UserState:
    up: bool = False  # the user believes their server runs (set once ready; cleared by a stop or cull)
    gpu: bool = False  # doing GPU work now
    hub: bool = False  # making hub activity now
    present: bool = False  # at the notebook now (answers a culler's warning with "Keep my GPU")
    job_since: float | None = None  # real time a GPU job started
    uuid: str = ""  # the device of their claim


class Replay:
    def __init__(
        self,
        policy: str,
        trace: list[Session],
        span: float,
        activity_every: float,
        scale: float,
        hub: Hub,
        api: KubeAPI,
        namespace: str,
        uuids: dict[tuple[str, str], str],
        load_file: LoadFile,
        owned: set[str],
        jobs_home: Path | None = None,
        homes: Path | None = None,
    ) -> None:
        self.policy, self.trace, self.span, self.scale = policy, trace, span, scale
        # (d): the users' kernels live in the holder, which parks them when it goes; `homes`: the
        # users' home folders (where the parks are), to read the park records at the end.
        self.parks = base_policy(policy) == "park"
        self.homes = homes
        self.built: set[str] = set()  # users whose kernel state was built (a later start checks it)
        self.restoring: set[str] = set()  # (d): users whose notebook the bench's client restores now
        self.restores: list[dict[str, Any]] = []  # per later start: seconds, kept or lost
        self.activity_every = activity_every
        self.hub, self.api, self.ns, self.uuids, self.load_file = hub, api, namespace, uuids, load_file
        self.owned = owned  # the UUIDs of this replay's slots (its entries in the load file)
        # Issue 19 item 6: `job` phases go to notebook jobs (the users' homes are under jobs_home).
        self.jobs_home = jobs_home
        self.jobs: list[dict[str, Any]] = []
        self.held_jobs = 0.0  # GPU-hours held by notebook jobs (busy: papermill runs the notebook)
        self.users = sorted({s.user for s in trace})
        self.state = {u: UserState() for u in self.users}
        self.lock = threading.Lock()
        self.load_lock = threading.Lock()
        self.done = threading.Event()
        self.servers: dict[str, dict[str, Any]] = {}
        self.starting: set[str] = set()  # users waiting for their server
        self.gpu_seen: dict[str, float] = {}  # when the monitor first saw a starting user's claim allocated
        self.waits: list[dict[str, Any]] = []
        self.culls: list[dict[str, Any]] = []
        self.warnings: set[tuple[str, str]] = set()  # (user, warned-at) as the claims showed them
        self.keeps: list[dict[str, Any]] = []  # "Keep my GPU" clicked by a user at the notebook
        # per user: (wall time, GPU busy, a job) at every change: what a cull took, by its time
        self.timeline: dict[str, list[tuple[float, bool, bool]]] = {u: [] for u in self.users}
        self.held = self.held_idle = self.held_busy = self.held_starting = 0.0  # simulated GPU-hours
        self.held_idle_contended = 0.0  # ... of the idle: while someone waited for a GPU
        self.held_idle_kept = 0.0  # ... of the idle: kept for a stopped (or culled) server
        self.held_idle_present = 0.0  # ... of the idle: the user at the notebook, no GPU work
        self.held_idle_away = 0.0  # ... of the idle: the server up, the user away
        self.held_releasing = 0.0  # GPU-hours (compressed) while the claim is being deleted
        self.samples = 0
        self.errors: list[str] = []
        self.t0 = 0.0
        self.wall_t0 = 0.0
        self._load = ""

    def sim(self, t: float | None = None) -> float:
        return ((time.monotonic() if t is None else t) - self.t0) / self.scale

    def sleep_until(self, sim_h: float) -> bool:
        """Sleep until that simulated time; False when the trace ended first."""
        return not self.done.wait(max(0.0, self.t0 + sim_h * self.scale - time.monotonic()))

    # -- the users -------------------------------------------------------------------------
    def obtain(self, user: str, why: str) -> bool:
        """Start the user's server and wait until it is ready (or the trace ends)."""
        want = time.monotonic()
        posted = 0.0
        with self.lock:
            self.starting.add(user)
            self.gpu_seen.pop(user, None)
        try:
            while not self.done.is_set():
                m = self.servers.get(user)
                if m and m.get("ready"):
                    got = time.monotonic()
                    claim = self.api.get_or_none("ResourceClaim", f"gpu-{user}", self.ns) or {}
                    alloc = (claim.get("status") or {}).get("allocation") or {}
                    results = alloc.get("devices", {}).get("results")
                    uuid = self.uuids.get((results[0]["pool"], results[0]["device"]), "") if results else ""
                    with self.lock:
                        self.state[user].uuid = uuid
                    restore_s = self.restore(user) if self.parks else 0.0
                    with self.lock:
                        self.state[user].up = True
                    wait = self._wait(user, why, want, self.gpu_seen.get(user, got), got)
                    wait["restore_seconds"] = round(restore_s, 2)
                    wait["total_hours"] = round(wait["total_hours"] + restore_s / 3600, 4)
                    self.waits.append(wait)
                    return True
                idle = not m or (not m.get("pending") and not m.get("ready"))
                if idle and time.monotonic() - posted > 3:
                    code, body = self.hub.api("POST", f"/users/{user}/server")
                    if code not in (201, 202, 400):
                        self.errors.append(f"spawn {user}: {code} {body}")
                    posted = time.monotonic()
                self.done.wait(0.1)
            self.waits.append(self._wait(user, why, want, self.gpu_seen.get(user), None))
            return False
        finally:
            with self.lock:
                self.starting.discard(user)

    def restore(self, user: str) -> float:
        """(d): the user opens their notebook (its kernel restored from the park, when there is
        one) and finds their variables, or builds them at the first start. Real seconds from the
        server's ready to the state checked (the restore, the kernel's start), counted in the
        user's waiting at that length; each later start's check is recorded (kept or lost), and a
        check that could not run says why (`error`): a bench failure, reported.

        Meanwhile the user's GPU reads busy (the restore fills it): the client's seconds are real
        ones, which the compression would otherwise turn into minutes of an idle GPU, past the
        culler's shortest rule (GPU idle 2 min while someone waits: 2 s here). A restore of this
        state takes about as long on a real cluster, where that rule is 120 real seconds away; in
        the fifth round every check that did not run was a cull in that window."""
        t0 = time.monotonic()
        rec: dict[str, Any] = {"user": user, "at": round(self.sim(), 3)}
        with self.lock:
            self.restoring.add(user)
        self.push_load()
        try:
            base = f"/user/{user}"
            deadline = time.monotonic() + 240
            self._nb_json("GET", f"{base}/api/sessions", deadline)  # the restore runs at adoption
            state: Any = None
            while time.monotonic() < deadline:
                state = self._nb_json("GET", f"{base}/gpusessions/restore", deadline)
                if (state or {}).get("state") not in ("restoring", "pending"):
                    break
                self._pause(user, 0.2)
            rec["restore_state"] = (state or {}).get("state")
            body = {
                "path": PARK_NOTEBOOK,
                "name": PARK_NOTEBOOK,
                "type": "notebook",
                "kernel": {"name": "python3"},
            }
            sess = self._nb_json("POST", f"{base}/api/sessions", deadline, body)
            kid = sess["kernel"]["id"]
            rec["kernel"] = kid
            if user in self.built:
                out = self._run_cell(user, kid, PARK_CHECK, deadline).strip()
                rec["kept"] = out == "kept"
                if out != "kept":  # lost: the user builds it again
                    self._run_cell(user, kid, PARK_STATE, deadline)
            else:
                self._run_cell(user, kid, PARK_STATE, deadline)
                self.built.add(user)
                rec["first"] = True
        except Exception as e:  # recorded: neither kept nor lost is known (a bench failure)
            rec["error"] = f"{type(e).__name__}: {e}"[:300]
            self.errors.append(f"restore {user}: {rec['error']}")
        finally:
            with self.lock:
                self.restoring.discard(user)
            self.push_load()
        rec["seconds"] = round(time.monotonic() - t0, 2)
        self.restores.append(rec)
        return time.monotonic() - t0

    def _server_up(self, user: str) -> bool:
        """The hub still has the user's server running (not stopped or culled meanwhile)."""
        m = self.servers.get(user) or {}
        return bool(m.get("ready")) and m.get("pending") != "stop"

    def _pause(self, user: str, seconds: float) -> None:
        """Wait a little before asking again; the trace's end or the server's stop end the wait."""
        if self.done.wait(seconds):
            raise RuntimeError("the trace ended during the check")
        if not self._server_up(user):
            raise RuntimeError("the server was stopped during the check")

    def _nb_json(self, method: str, path: str, deadline: float, body: Any = None) -> Any:
        """A request to the user's notebook server through the proxy (the bench's admin token),
        its JSON answer; asked again while the server is up but does not answer it yet (the
        proxy's 502/503 or the hub's page while its route is set, a 5xx of the server's start)."""
        import urllib.error
        import urllib.request

        user = path.split("/")[2]
        why = ""
        while time.monotonic() < deadline:
            req = urllib.request.Request(
                self.hub.url + path,
                method=method,
                data=None if body is None else json.dumps(body).encode(),
                headers={"Authorization": f"token {self.hub.token}", "Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    raw = r.read()
                    if "json" in r.headers.get("Content-Type", ""):
                        return json.loads(raw) if raw else None
                    why = f"{r.status} {r.headers.get('Content-Type')} (not the server's answer)"
            except urllib.error.HTTPError as e:
                if e.code < 500 and e.code != 404:
                    raise RuntimeError(f"{method} {path}: {e.code}") from None
                why = f"{e.code}"
            except (urllib.error.URLError, OSError, ValueError) as e:
                why = f"{type(e).__name__}: {e}"
            self._pause(user, 0.3)
        raise RuntimeError(f"{method} {path}: no answer in time ({why})")

    def _run_cell(self, user: str, kid: str, code: str, deadline: float) -> str:
        """Run a cell in the kernel while it exists (GET .../api/kernels/<id>); a websocket that
        closes before the reply while the server is still up is opened again (the cell is only
        sent again when no reply came). The cell's stdout."""
        while True:
            self._nb_json("GET", f"/user/{user}/api/kernels/{kid}", deadline)  # it exists
            try:
                return execute(self.hub.url, user, kid, self.hub.token, code, timeout=120)
            except (ConnectionError, OSError) as e:
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"the kernel's channels: {e}") from None
                self.errors.append(f"restore {user}: the kernel's channels closed, again: {e}")
            self._pause(user, 0.3)

    def park_records(self) -> list[dict[str, Any]]:
        """(d): every park the holders wrote (restored ones are moved aside, kept): status, seconds."""
        out: list[dict[str, Any]] = []
        if self.homes is None:
            return out
        for f in sorted(self.homes.glob("*/.gpusessions/parked/*/session.json")):
            with contextlib.suppress(OSError, ValueError):
                rec = json.loads(f.read_text())
                out.append(
                    {
                        "user": f.parts[-5],
                        "folder": f.parent.name,
                        "complete": bool(rec.get("complete")),
                        "seconds": rec.get("seconds"),
                        "kernels": [k.get("status") for k in rec.get("kernels") or []],
                    }
                )
        return out

    def _wait(
        self, user: str, why: str, want: float, gpu: float | None, ready: float | None
    ) -> dict[str, Any]:
        end = self.sim()
        gpu_h = (end if gpu is None else self.sim(gpu)) - self.sim(want)
        # The notebook's start after the allocation is a real duration (seconds), not a simulated
        # one: compressed it would read as a large fraction of an hour per start.
        start_s = 0.0 if gpu is None or ready is None else max(0.0, ready - gpu)
        return {
            "user": user,
            "why": why,
            "at": round(self.sim(want), 3),
            "gpu_hours": round(gpu_h, 3),
            "ready_hours": round((end if ready is None else self.sim(ready)) - self.sim(want), 3),
            "start_seconds": round(start_s, 1),
            "total_hours": round(gpu_h + start_s / 3600, 4),
            "censored": ready is None,
            "no_gpu": gpu is None,
        }

    def set(self, user: str, gpu: bool, hub: bool, job: bool = False, present: bool = False) -> None:
        with self.lock:
            st = self.state[user]
            st.gpu, st.hub, st.present = gpu, hub, present
            self.timeline[user].append((time.time(), gpu, job))
            st.job_since = time.monotonic() if job else None
        self.push_load()

    def run_user(self, user: str) -> None:
        try:
            for s in (s for s in self.trace if s.user == user):
                if not self.sleep_until(s.start):
                    return
                first = True
                why = "after cull"
                for n, ph in enumerate(s.phases):
                    st = self.state[user]
                    if ph.kind == "job" and self.jobs_home is not None:
                        # The long job goes to a notebook job; the user stops the server and gives
                        # its GPU back meanwhile (POST .../release: the job may need it), and comes
                        # back to the notebook when the job is done.
                        if st.up:
                            self.stop_server(user, release=True)
                        if not self.run_job(user, ph.hours, f"{s.start:g}-{n}"):
                            return
                        why = "after a notebook job"
                        continue
                    if ph.kind != "pause" and st.up and not self.answer_on_return(user):
                        st.up = False  # the Keep came too late: the culler's stop had begun
                    if ph.kind != "pause" and not st.up and not self.obtain(user, "start" if first else why):
                        return
                    first = False
                    why = "after cull"
                    if ph.kind == "work":
                        self.set(user, True, True, present=True)
                    elif ph.kind == "cpu":
                        self.set(user, False, True, present=True)
                    elif ph.kind == "job":
                        self.set(user, True, False, job=True)
                    else:
                        self.set(user, False, s.tab_open)
                    if self.done.wait(ph.hours * self.scale):
                        return
                self.set(user, False, s.tab_open and s.end == "leave")
                if s.end == "stop" and self.state[user].up:
                    self.stop_server(user)
        except Exception as e:  # reported; the replay goes on
            self.errors.append(f"{user}: {type(e).__name__}: {e}")

    def answer_on_return(self, user: str) -> bool:
        """A user coming to the notebook (work, a CPU phase, starting a job) with the culler's
        warning on screen (JupyterLab's notice stands until answered) clicks Keep my GPU first.
        False when the hub refused the keep: the culler's stop of the server had begun (the
        user reads that in the notice and does not start work on a GPU that is going)."""
        claim = self.api.get_or_none("ResourceClaim", f"gpu-{user}", self.ns)
        if claim is None or claim["metadata"].get("deletionTimestamp"):
            return False  # the GPU is gone or going (JupyterLab says so): start the server again
        ann = claim["metadata"].get("annotations") or {}
        warned = ann.get(WARNED_AT)
        if not warned or ann.get(KEEP_UNTIL):
            return True
        self.warnings.add((user, warned))
        at = round(self.sim(), 3)
        code, _ = self.hub.api("POST", f"/gpusessions/users/{user}/keep")
        self.keeps.append({"user": user, "at": at, "code": code, "on_return": True})
        return code == 200

    def stop_server(self, user: str, release: bool = False) -> None:
        self.set(user, False, False)
        with self.lock:
            self.state[user].up = False
        if release:  # stop, and give the GPU back at once (the hub's release endpoint)
            self.hub.api("POST", f"/gpusessions/users/{user}/release")
        else:
            self.hub.api("DELETE", f"/users/{user}/server")
        while not self.done.is_set():
            m = self.servers.get(user)
            if not m or (not m.get("ready") and not m.get("pending")):
                break
            self.done.wait(0.25)

    def run_job(self, user: str, hours: float, tag: str) -> bool:
        """Submit the `job` phase as a notebook job (papermill runs a notebook that works for the
        phase's length) through the hub's endpoint, and wait until it ends; False if the trace
        ended first. Its wait in the team queue counts apart from the sessions' waits."""
        assert self.jobs_home is not None
        name = f"bench-job-{tag}.ipynb"
        home = self.jobs_home / user
        home.mkdir(parents=True, exist_ok=True)
        cell = f"import time\ntime.sleep({hours * self.scale:.1f})\nprint('trained')"
        nb = {
            "cells": [
                {"cell_type": "code", "metadata": {}, "source": cell, "outputs": [], "execution_count": None}
            ],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        (home / name).write_text(json.dumps(nb))
        submitted = time.monotonic()
        body = {"name": f"bench {tag}", "input": name, "size": "bench-gpu"}
        code, job = self.hub.api("POST", f"/gpusessions/users/{user}/jobs", body)
        rec: dict[str, Any] = {
            "user": user,
            "at": round(self.sim(submitted), 3),
            "hours": hours,
            "code": code,
        }
        self.jobs.append(rec)
        if code != 201:
            self.errors.append(f"job {user}: {code} {job}")
            return not self.done.wait(hours * self.scale)  # as if it ran: the trace goes on
        running: float | None = None
        state = "queued"
        while not self.done.is_set():
            code, j = self.hub.api("GET", f"/gpusessions/users/{user}/jobs/{job['id']}")
            state = (j or {}).get("state", "?") if code == 200 else f"http {code}"
            if state == "running" and running is None:
                running = time.monotonic()
            if state in ("completed", "failed", "stopped") or code == 404:
                break
            self.done.wait(0.5)
        end = time.monotonic()
        rec.update(
            state=state,
            queue_hours=round(((running or end) - submitted) / self.scale, 3),
            ran_hours=round((end - running) / self.scale, 3) if running else 0.0,
        )
        return not self.done.is_set()

    # -- the world: hub state, culls, the simulated NVML, accounting -----------------------
    def push_load(self) -> None:
        with self.load_lock:  # one writer at a time, so the file never goes back to an older state
            with self.lock:
                load = {
                    st.uuid: {"activity": 90, "processes": 1, "memory_used_mib": 4096}
                    for u, st in self.state.items()
                    if st.uuid and ((st.up and st.gpu) or u in self.restoring)
                }
            text = json.dumps(load, sort_keys=True)
            if text != self._load:
                self.load_file.update(self.owned, load)
                self._load = text

    def monitor(self) -> None:
        last = time.monotonic()
        last_activity = 0.0
        while not self.done.is_set():
            try:
                now = time.monotonic()
                culled = []
                with self.lock:
                    for u, st in self.state.items():
                        m = self.servers.get(u) or {}
                        if st.up and (m.get("pending") == "stop" or not m.get("ready")):
                            lost = (now - st.job_since) / self.scale if st.gpu and st.job_since else 0.0
                            culled.append(
                                {"user": u, "at": self.sim(now), "busy": st.gpu, "lost_hours": lost}
                            )
                            st.up = st.gpu = st.hub = st.present = False
                            st.job_since = None
                    busy = {u for u, st in self.state.items() if st.up and st.gpu}
                    starting = set(self.starting)
                    ticking = [u for u, st in self.state.items() if st.up and st.hub]
                    present = {u for u, st in self.state.items() if st.up and st.present}
                self.culls += culled
                if culled:
                    self.push_load()
                claims = self.api.list("ResourceClaim", self.ns)["items"]
                now = time.monotonic()
                dt = (now - last) / self.scale
                last = now
                is_job = [
                    (cl["metadata"].get("labels") or {}).get("gpusessions.io/component") == "job"
                    for cl in claims
                ]
                for cl, job in zip(claims, is_job, strict=True):
                    if job and (cl.get("status") or {}).get("allocation"):
                        self.held += dt  # a notebook job's GPU: papermill runs its notebook
                        self.held_busy += dt
                        self.held_jobs += dt
                claims = [cl for cl, job in zip(claims, is_job, strict=True) if not job]
                allocated = {
                    cl["metadata"]["name"].removeprefix("gpu-")
                    for cl in claims
                    if (cl.get("status") or {}).get("allocation")
                }
                # A claim being deleted (a cull or a release asked for it) holds its device until
                # the pods that use it are gone: seconds of real time, which the compression would
                # turn into minutes. Counted at its real length, as a notebook's start is.
                releasing = {
                    cl["metadata"]["name"].removeprefix("gpu-")
                    for cl in claims
                    if cl["metadata"].get("deletionTimestamp")
                }
                waiting = bool(starting - allocated)  # someone wants a GPU and has none
                for user in allocated:
                    self.held += dt
                    if user in busy:
                        self.held_busy += dt
                    elif user in starting:
                        self.held_starting += dt
                    elif user in releasing:
                        self.held_releasing += dt
                        real = dt * self.scale / 3600  # its real length, in hours
                        self.held_idle += real
                        self.held_idle_kept += real
                        if waiting:
                            self.held_idle_contended += real
                    else:
                        self.held_idle += dt
                        if waiting:
                            self.held_idle_contended += dt
                        if not self.state[user].up:
                            self.held_idle_kept += dt
                        elif user in present:
                            self.held_idle_present += dt
                        else:
                            self.held_idle_away += dt
                with self.lock:
                    for user in allocated & self.starting:
                        self.gpu_seen.setdefault(user, now)
                self.samples += 1
                if now - last_activity >= self.activity_every * self.scale:
                    last_activity = now
                    stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
                    for u in ticking:
                        body = {"last_activity": stamp, "servers": {"": {"last_activity": stamp}}}
                        self.hub.api("POST", f"/users/{u}/activity", body)
            except Exception as e:  # a missed sample; go on
                self.errors.append(f"monitor: {type(e).__name__}: {e}")
            self.done.wait(0.5)

    def poll_servers(self) -> None:
        """The hub's view of every user's server, every 0.2 s: the users see their server ready
        (and culled) within a fraction of a second, as a browser on the spawn page does; at the
        replay's compression the monitor's own round (claims, accounting) is too slow for it."""
        while not self.done.is_set():
            try:
                code, body = self.hub.api("GET", "/users")
                if code == 200:
                    items = body if isinstance(body, list) else body.get("items", [])
                    self.servers = {u["name"]: (u.get("servers") or {}).get("") or {} for u in items}
            except Exception as e:  # a missed look; go on
                self.errors.append(f"servers: {type(e).__name__}: {e}")
            self.done.wait(0.2)

    def answer_warnings(self) -> None:
        """The JupyterLab notice: a user at the notebook who is warned clicks Keep my GPU, at once
        (the claims are read every 0.2 s, each keep in a thread of its own): at the replay's
        compression a warning's lead is a second or two of real time, and a user who answers
        within a simulated minute must not be modelled as one who answers after it."""
        while not self.done.is_set():
            try:
                claims = self.api.list("ResourceClaim", self.ns)["items"]
                with self.lock:
                    present = {u for u, st in self.state.items() if st.up and st.present}
                for cl in claims:
                    ann = cl["metadata"].get("annotations") or {}
                    user = cl["metadata"]["name"].removeprefix("gpu-")
                    warned = ann.get(WARNED_AT)
                    if warned and not ann.get(KEEP_UNTIL) and (user, warned) not in self.warnings:
                        self.warnings.add((user, warned))
                        if user in present:
                            threading.Thread(target=self._keep, args=(user,), daemon=True).start()
            except Exception as e:  # a missed look; go on
                self.errors.append(f"warnings: {type(e).__name__}: {e}")
            self.done.wait(0.2)

    def _keep(self, user: str) -> None:
        at = round(self.sim(), 3)
        code, _ = self.hub.api("POST", f"/gpusessions/users/{user}/keep")
        self.keeps.append({"user": user, "at": at, "code": code})

    def run(self) -> dict[str, Any]:
        for u in self.users:
            self.hub.api("POST", f"/users/{u}")
        self.t0 = time.monotonic()
        self.wall_t0 = time.time()
        threads = [threading.Thread(target=self.monitor, daemon=True)]
        threads += [threading.Thread(target=self.answer_warnings, daemon=True)]
        threads += [threading.Thread(target=self.poll_servers, daemon=True)]
        threads += [threading.Thread(target=self.run_user, args=(u,), daemon=True) for u in self.users]
        for t in threads:
            t.start()
        end = self.t0 + self.span * self.scale
        while time.monotonic() < end:
            time.sleep(min(5.0, max(0.0, end - time.monotonic())))
            print(
                f"  [{self.policy}] t={self.sim():.1f} h held {self.held:.2f} idle {self.held_idle:.2f} "
                f"waits {len(self.waits)} culls {len(self.culls)}",
                file=sys.stderr,
            )
        self.done.set()
        for t in threads:
            t.join(30)
        return self.result()

    def culls_by_log(self) -> list[dict[str, Any]]:
        """Every stop of a user's server by a culler (not by the bench's users), from the hub's
        request log, at the time the request reached the hub; with what the user did then."""
        out = []
        pat = re.compile(
            r"^\[I (\S+ \S+) .*\] (?:20[24] DELETE /hub/api/users/([^/]+)/server"
            r"|202 POST /hub/api/gpusessions/users/([^/]+)/cull) \(([^@]+)@[^)]*\) ([\d.]+)ms"
        )
        for line in self.hub.log.read_text(errors="replace").splitlines():
            m = pat.match(line)
            if not m or m.group(4) not in ("gpusessions", "idle-culler"):
                continue
            done = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
            at = done - float(m.group(5)) / 1000
            user = m.group(2) or m.group(3)
            before = [e for e in self.timeline.get(user, []) if e[0] <= at]
            busy, job = (before[-1][1], before[-1][2]) if before else (False, False)
            job_since = None
            for e in reversed(before):  # the job's start: the earliest change of the job's run
                if not e[2]:
                    break
                job_since = e[0]
            out.append(
                {
                    "user": user,
                    "at": round((at - self.wall_t0) / self.scale, 3),
                    "busy": busy,
                    "job": job,
                    "lost_hours": round((at - job_since) / self.scale, 3) if job_since else 0.0,
                    # real seconds the user's current phase had run: under the agent's 2 s sampling
                    # period the culler cannot have seen that GPU work
                    "phase_seconds": round(at - before[-1][0], 2) if before else None,
                }
            )
        return out

    def result(self) -> dict[str, Any]:
        by_log = self.culls_by_log()
        lost = [c for c in by_log if c["busy"]]
        gpu_waits = [w["gpu_hours"] for w in self.waits]
        ready_waits = [w["ready_hours"] for w in self.waits]
        starts = [w["start_seconds"] for w in self.waits if not w["censored"] and not w["no_gpu"]]
        later = [r for r in self.restores if not r.get("first")]
        parks = self.park_records() if self.parks else []
        park_s = [p["seconds"] for p in parks if isinstance(p.get("seconds"), int | float)]
        restore_s = [r["seconds"] for r in later if "error" not in r]
        if self.parks:  # a state lost: a later start that did not find it, or a park not complete
            lost_states = sum(r.get("kept") is False for r in later) + sum(not p["complete"] for p in parks)
        else:  # (b), (c): every cull ends the kernels (their variables, models) with the server
            lost_states = len(by_log) if base_policy(self.policy) != "none" else 0
        return {
            "gpu_hours_held": round(self.held, 3),
            "gpu_hours_held_idle": round(self.held_idle, 3),
            "gpu_hours_held_idle_while_someone_waits": round(self.held_idle_contended, 3),
            "gpu_hours_held_idle_kept_after_stop": round(self.held_idle_kept, 3),
            "gpu_hours_held_idle_user_at_notebook": round(self.held_idle_present, 3),
            "gpu_hours_held_idle_user_away": round(self.held_idle_away, 3),
            "gpu_hours_held_while_released_compressed": round(self.held_releasing, 3),
            "gpu_hours_held_busy": round(self.held_busy, 3),
            "gpu_hours_held_starting": round(self.held_starting, 3),
            "wait_for_gpu_hours": round(sum(gpu_waits), 3),
            "wait_for_server_hours": round(sum(ready_waits), 3),
            "wait_total_hours": round(sum(w["total_hours"] for w in self.waits), 3),
            "start_seconds_median": round(statistics.median(starts), 1) if starts else 0.0,
            "wait_for_gpu_median": round(statistics.median(gpu_waits), 3) if gpu_waits else 0.0,
            "waits": len(self.waits),
            "waits_after_cull": sum(w["why"] == "after cull" for w in self.waits),
            "waits_never_served": sum(w["no_gpu"] for w in self.waits),
            "culls": len(by_log),
            "sessions_state_lost": lost_states,
            "parks": len(parks),
            "parks_incomplete": sum(not p["complete"] for p in parks),
            "park_seconds_median": round(statistics.median(park_s), 2) if park_s else 0.0,
            "restores_checked": sum("kept" in r for r in later),
            "restores_kept": sum(r.get("kept") is True for r in later),
            "restores_unknown": sum("error" in r for r in later),
            "checks": len(self.restores),
            "checks_not_run": sum("error" in r for r in self.restores),
            "restore_seconds_median": round(statistics.median(restore_s), 2) if restore_s else 0.0,
            "restore_seconds_max": round(max(restore_s), 2) if restore_s else 0.0,
            "restore_log": self.restores,
            "park_log": parks,
            "culls_of_busy_gpus": len(lost),
            "culls_noticed_during_work": sum(c["busy"] for c in self.culls),
            "lost_work_gpu_hours": round(sum(c["lost_hours"] for c in lost), 3),
            "warnings": len(self.warnings),
            "keeps": len(self.keeps),
            "keeps_on_return": sum(bool(k.get("on_return")) for k in self.keeps),
            "keeps_refused": sum(k["code"] != 200 for k in self.keeps),
            "notebook_jobs": len(self.jobs),
            "notebook_jobs_completed": sum(j.get("state") == "completed" for j in self.jobs),
            "notebook_job_queue_hours": round(sum(j.get("queue_hours", 0.0) for j in self.jobs), 3),
            "gpu_hours_held_by_notebook_jobs": round(self.held_jobs, 3),
            "job_log": self.jobs,
            "samples": self.samples,
            "wait_log": self.waits,
            "cull_log": by_log,
            "errors": self.errors[:20],
        }


# --- the cluster side --------------------------------------------------------------------------
def static_slices(api: KubeAPI) -> list[tuple[str, str, str, str, str]]:
    """(pool, device, uuid, profile, parent) of every MIG device with its own UUID (static MIG)."""
    out = []
    for sl in api.list("ResourceSlice")["items"]:
        spec = sl["spec"]
        if spec.get("driver") != "gpu.nvidia.com":
            continue
        for d in spec.get("devices") or []:
            attrs = d.get("attributes") or {}
            kind = (attrs.get("type") or {}).get("string")
            uuid = (attrs.get("uuid") or {}).get("string")
            if kind == "mig" and uuid:
                profile = (attrs.get("profile") or {}).get("string", "")
                parent = (attrs.get("parentUUID") or {}).get("string", "")
                out.append((spec["pool"]["name"], d["name"], uuid, profile, parent))
    return sorted(out)


def children(pid: int) -> list[int]:
    """Direct children of a process (the hub's proxy and its managed services)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
    return out


def start_with_retries(cfg: str, workdir: Path, tries: int = 3) -> Hub:
    """Start a hub; on a loaded machine a start may fail (JupyterHub gives its managed culler
    service 30 s to answer, then exits): try again, in a fresh folder."""
    for attempt in range(1, tries + 1):
        try:
            return start_hub(
                cfg, workdir if attempt == 1 else workdir.with_name(f"{workdir.name}-{attempt}"), timeout=300
            )
        except HubError as e:
            if attempt == tries:
                raise
            print(f"bench_idle: hub start failed ({str(e).splitlines()[0]}); trying again", file=sys.stderr)
    raise AssertionError("unreachable")


def stop_hub(hub: Hub) -> None:
    """Stop the hub, then whatever it started that outlived it (the proxy and the services
    run in their own sessions; a hub killed after its stop timeout leaves them behind)."""
    kids = children(hub.proc.pid)
    hub.stop()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [k for k in kids if Path(f"/proc/{k}").exists()]
        for k in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(k, sig)
        if alive:
            time.sleep(3)


def wait_gone(api: KubeAPI, namespace: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and api.get_or_none("Namespace", namespace) is not None:
        time.sleep(1)


def ratio(x: float, y: float) -> float | None:
    return round(x / y, 3) if y else None


def parse_variant(spec: str, base: Limits) -> tuple[str, Limits]:
    """'NAME:field=hours,field=hours' -> (NAME, the limits with those fields changed)."""
    name, _, rest = spec.partition(":")
    if not re.fullmatch(r"[A-Za-z0-9-]{1,20}", name):
        raise ValueError("the name must be 1-20 letters, digits or dashes")
    known = {f for f in asdict(base)}
    over: dict[str, float] = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key not in known:
            raise ValueError(f"unknown field {key!r}; known: {', '.join(sorted(known))}")
        try:
            over[key] = float(value)
        except ValueError:
            raise ValueError(f"{key}: not a number of hours: {value!r}") from None
    return name, replace(base, **over)


PROFILE_DEFAULTS = {  # the bench's shape per generated profile: slots and time scale
    # Less compressed than before issue 17's concurrent replays (20 and 6): a notebook's start of
    # 15 s is 0.25 simulated hours here, not 0.75 or 2.5; the run takes one replay's time.
    "workday": {"slots": 3, "scale": 60.0},
    "notebook": {"slots": 7, "scale": 18.0},
}


def build_trace(args: argparse.Namespace) -> tuple[list[Session], float, float, dict[str, Any]]:
    """(trace, span in hours, activity_every, what to record about it)."""
    if args.trace:
        trace = idletrace.load(args.trace)
        span = args.hours or idletrace.span(args.trace) or max(s.start + s.hours for s in trace)
        return trace, span, TraceParams.activity_every, {"file": str(args.trace)}
    over = {"users": args.users, "hours": args.hours or None, "seed": args.seed}
    params = idletrace.params_for(args.profile, **over)
    return idletrace.generate_any(params), params.hours, params.activity_every, {"params": asdict(params)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--profile",
        choices=idletrace.PROFILES,
        default="workday",
        help="the generated trace: a working day (8 users, 8 h) or calibrated to published "
        "notebook use (48 h; see tests/bench/idletrace.py)",
    )
    ap.add_argument("--trace", type=Path, help="replay this JSON trace instead of a generated one")
    ap.add_argument("--write-trace", type=Path, help="write the trace (generated or read) to this file")
    ap.add_argument("--users", type=int, help="users of the generated trace (profile default)")
    ap.add_argument("--hours", type=float, help="span in simulated hours (profile default; a file: its end)")
    ap.add_argument("--slots", type=int, help="GPU slices the users share (1-7; profile default)")
    ap.add_argument("--scale", type=float, help="real seconds per simulated hour (profile default)")
    ap.add_argument("--seed", type=int, help="generator seed (profile default)")
    ap.add_argument("--policies", default=",".join(POLICIES), help="a subset, for trying things out")
    ap.add_argument(
        "--gpu-idle-limit",
        type=float,
        default=Limits.gpu_idle,
        help="(c) --gpu-idle-limit in simulated hours (default: our default, 1 h)",
    )
    ap.add_argument(
        "--gpu-idle-limit-contended",
        type=float,
        default=Limits.gpu_idle_contended,
        help="(c) --gpu-idle-limit-contended in simulated hours (default: our default, 2 min; 0: off)",
    )
    ap.add_argument(
        "--keep-contended",
        type=float,
        default=Limits.keep_contended,
        help="(c) --keep-contended in simulated hours (default: ours, 5 min; 0: a keep holds its 4 h)",
    )
    ap.add_argument(
        "--variant",
        action="append",
        metavar="NAME:FIELD=HOURS,...",
        help="one more (c) replay with other culler limits (fields of Limits, in simulated hours), "
        "e.g. 'c10:gpu_idle_contended=0.1667,keep_contended=0.25'; repeatable",
    )
    ap.add_argument(
        "--park-variant",
        action="append",
        metavar="NAME:FIELD=HOURS,...",
        help="one more (d) replay with other limits, e.g. 'P30:park_gpu_idle=0.5,park_keep_limit=1'; "
        "repeatable",
    )
    ap.add_argument(
        "--agent-interval",
        type=float,
        default=0.1,
        help="real seconds between the holders' agent samples (GPUSessionSpawner.agent_interval; the "
        "agent's own default is 2 s, which compressed time turns into many simulated minutes)",
    )
    ap.add_argument(
        "--shape",
        default="idle-bench",
        help="the local cluster's shape (idle-bench: 8 GPUs of 7 1g.10gb slices, one per concurrent replay)",
    )
    ap.add_argument("--first-gpu", type=int, default=0, help="skip this many GPUs (two bench runs at once)")
    ap.add_argument(
        "--sequential",
        action="store_true",
        help="replay the policies one after the other on one GPU (before issue 17's concurrent replays)",
    )
    ap.add_argument(
        "--jobs-as-notebook-jobs",
        action="store_true",
        help="one more (c) replay, '(c) jobs', where each `job` phase is a notebook job (docs/jobs.md) "
        "in a KAI team queue while the user's server is stopped (issue 19 item 6)",
    )
    ap.add_argument("--only-write", action="store_true", help="write the trace, replay nothing")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    try:
        trace, span, activity_every, trace_info = build_trace(args)
    except TraceError as e:
        print(f"bench_idle: bad trace: {e}", file=sys.stderr)
        return 2
    if args.write_trace:
        idletrace.dump(trace, args.write_trace, span)
        print(f"wrote {len(trace)} sessions to {args.write_trace}", file=sys.stderr)
    if args.only_write:
        return 0
    shape = PROFILE_DEFAULTS["notebook" if args.trace or args.profile == "notebook" else "workday"]
    args.slots = args.slots or int(shape["slots"])
    args.scale = args.scale or shape["scale"]
    try:
        import jupyterhub_idle_culler  # noqa: F401
    except ImportError:
        print("needs jupyterhub-idle-culler: .venv/bin/pip install jupyterhub-idle-culler", file=sys.stderr)
        return 2
    limits = Limits(
        gpu_idle=args.gpu_idle_limit,
        gpu_idle_contended=args.gpu_idle_limit_contended,
        keep_contended=args.keep_contended,
    )
    policies = [p for p in args.policies.split(",") if p]
    variants: dict[str, Limits] = {p: limits for p in policies}
    for flag, policy, specs in (
        ("--variant", "gpusessions", args.variant),
        ("--park-variant", "park", args.park_variant),
    ):
        for spec in specs or []:
            try:
                name, over = parse_variant(spec, limits)
            except ValueError as e:
                print(f"bench_idle: {flag} {spec!r}: {e}", file=sys.stderr)
                return 2
            policies.append(f"{policy}:{name}")
            variants[policies[-1]] = over

    if args.jobs_as_notebook_jobs:
        policies.append("gpusessions:jobs")
        variants["gpusessions:jobs"] = limits

    paths = ClusterPaths.default()
    started = not lc.healthy(paths)
    lc.up(args.shape, paths=paths)
    api = KubeAPI.from_kubeconfig(paths.kubeconfig)
    slices = static_slices(api)
    # Per GPU (parent), its static slices, the small ones first (1g.10gb): each replay gets a GPU
    # of its own with `--slots` slices, the same sizes for every policy.
    by_parent: dict[str, list[tuple[str, str, str, str, str]]] = {}
    for s in sorted(slices, key=lambda s: (s[4], int(s[3].split("g")[0] or 0), s[1])):
        by_parent.setdefault(s[4], []).append(s)
    parents = [par for par, ss in sorted(by_parent.items()) if len(ss) >= args.slots][args.first_gpu :]
    groups = len(policies) if not args.sequential else 1
    if len(parents) < groups:
        raise SystemExit(
            f"--slots {args.slots}: {len(policies)} concurrent replays need {groups} GPUs with that many "
            f"static MIG slices, this cluster (shape {args.shape}) has {len(parents)} free for it "
            "(use --shape idle-bench, or --sequential)"
        )
    chosen_by: dict[str, list[tuple[str, str, str, str, str]]] = {
        policy: by_parent[parents[0 if args.sequential else i]][: args.slots]
        for i, policy in enumerate(policies)
    }
    uuids = {(pool, dev): uuid for pool, dev, uuid, _, _ in slices}
    load = LoadFile(paths.root / "fake-nvml" / "load.json")
    work = Path(tempfile.mkdtemp(prefix="bench-idle-"))
    results: dict[str, Any] = {}
    stamp = int(time.time())
    start_line = threading.Barrier(1 if args.sequential else len(policies))
    hub_start = threading.Lock()

    def replay_one(policy: str) -> None:
        chosen = chosen_by[policy]
        listed = ", ".join(repr(c[2]) for c in chosen)
        # Dynamic MIG devices have no uuid attribute: test the parent first (&& skips the rest).
        selector = (
            f"device.attributes['gpu.nvidia.com'].parentUUID == {chosen[0][4]!r} && "
            f"device.attributes['gpu.nvidia.com'].uuid in [{listed}]"
        )
        owned = {c[2] for c in chosen}
        ns = f"bench-idle-{policy.replace(':', '-').lower()}-{stamp}"[:63].rstrip("-")
        load.update(owned, {})
        print(f"{label(policy)}: replaying {len(trace)} sessions on {chosen[0][4]} ...", file=sys.stderr)
        jobs = policy == "gpusessions:jobs"
        queue = f"bench-team-{stamp}" if jobs else ""
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        if jobs:  # a department and its team queue, unlimited: the jobs' and the sessions' queue
            for name, parent in ((f"bench-dept-{stamp}", None), (queue, f"bench-dept-{stamp}")):
                unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
                spec: dict[str, Any] = {"resources": {k: dict(unlimited) for k in ("gpu", "cpu", "memory")}}
                if parent:
                    spec["parentQueue"] = parent
                api.create(
                    {
                        "apiVersion": "scheduling.run.ai/v2",
                        "kind": "Queue",
                        "metadata": {"name": name},
                        "spec": spec,
                    }
                )
        cfg = hub_config(policy, ns, selector, variants[policy], args.scale, args.agent_interval, queue)
        try:
            with hub_start:  # one at a time: free ports are picked at start, and must not collide
                hub = start_with_retries(cfg, work / policy.replace(":", "-"))
        except BaseException:
            start_line.abort()  # the others do not wait for this one
            for kind, name in (("Namespace", ns), ("Queue", queue), ("Queue", f"bench-dept-{stamp}")):
                if name and (kind == "Namespace" or jobs):
                    with contextlib.suppress(Exception):
                        api.delete(kind, name)
            raise
        try:
            # Concurrent replays start their clocks together, once every hub is up.
            with contextlib.suppress(threading.BrokenBarrierError):
                start_line.wait(timeout=600)
            replay = Replay(
                policy,
                trace,
                span,
                activity_every,
                args.scale,
                hub,
                api,
                ns,
                uuids,
                load,
                owned,
                jobs_home=paths.homes / ns if jobs else None,
                homes=paths.homes / ns,
            )
            results[policy] = replay.run()
        finally:
            stop_hub(hub)
            with contextlib.suppress(Exception):
                api.delete_collection("Pod", ns, grace_period=0)
                api.delete("Namespace", ns)
                wait_gone(api, ns)
            load.update(owned, {})
            if jobs:
                for name in (queue, f"bench-dept-{stamp}"):
                    with contextlib.suppress(Exception):
                        api.delete("Queue", name)
        print(f"  {label(policy)}: {results[policy]}", file=sys.stderr)

    try:
        if args.sequential:
            for policy in policies:
                replay_one(policy)
        else:
            # All policies at the same time, each with its own hub, namespace and GPU: the same
            # machine load for every policy, and the whole run takes one replay's time.
            threads = [threading.Thread(target=replay_one, args=(p,)) for p in policies]
            for th in threads:
                th.start()
                time.sleep(2)  # the hubs' starts apart
            for th in threads:
                th.join()
    finally:
        if started:
            lc.down(paths)
    missing = [p for p in policies if p not in results]
    if missing:  # reported, and the others' results are still written
        print(f"bench_idle: no result for {', '.join(missing)} (see above)", file=sys.stderr)
    if not results:
        return 1
    chosen = chosen_by[policies[0]]

    cmd = "tests/bench/bench_idle.py " + shlex.join(sys.argv[1:])
    summary = idletrace.trace_summary(trace, span)
    out: dict[str, Any] = {
        "command": cmd,
        "date": time.strftime("%Y-%m-%d"),
        **trace_info,
        "span_hours": span,
        "limits_hours": asdict(limits),
        "variants_hours": {p: asdict(v) for p, v in variants.items() if v != limits},
        "concurrent": not args.sequential,
        "agent_interval_seconds": args.agent_interval,
        "shape": args.shape,
        "slots": [f"{c[1]} ({c[3]})" for c in chosen],
        "scale_seconds_per_hour": args.scale,
        "trace": summary,
        "published": {k: v for k, v in PUBLISHED.items() if k in summary},
        "policies": results,
        "missing": missing,
    }
    ratios: dict[str, dict[str, float | None]] = {}
    pairs = [(p, "none") for p in results if p != "none"]
    pairs += [(p, "hub-activity") for p in results if base_policy(p) in ("gpusessions", "park")]
    pairs += [(p, "gpusessions") for p in results if base_policy(p) == "park"]
    for num, den in pairs:
        if num in results and den in results:
            a, b = results[num], results[den]
            ratios[f"{num}/{den}"] = {
                k: ratio(a[k], b[k])
                for k in (
                    "gpu_hours_held_idle",
                    "wait_for_gpu_hours",
                    "wait_for_server_hours",
                    "wait_total_hours",
                    "lost_work_gpu_hours",
                    "sessions_state_lost",
                )
            }
    out["ratios"] = ratios

    print(f"\ntrace: {out['trace']}; slots: {', '.join(out['slots'])}")
    print("\n| | " + " | ".join(label(p) for p in results) + " |")
    print("|---|" + "---|" * len(results))
    rows = (
        ("gpu_hours_held_idle", "GPU-hours held idle"),
        ("gpu_hours_held_idle_while_someone_waits", "... of which while someone waited for a GPU"),
        ("gpu_hours_held_idle_kept_after_stop", "... of which kept for a stopped or culled server"),
        ("gpu_hours_held_idle_user_at_notebook", "... of which the user at the notebook (no GPU work)"),
        ("gpu_hours_held_idle_user_away", "... of which the server up, the user away"),
        ("gpu_hours_held_busy", "GPU-hours held busy"),
        ("gpu_hours_held_starting", "GPU-hours held while the notebook starts"),
        (
            "gpu_hours_held_while_released_compressed",
            "GPU-hours held while the claim is deleted, compressed (in idle at its real length)",
        ),
        ("wait_for_gpu_hours", "user waiting for a GPU, hours in all"),
        ("wait_for_gpu_median", "user waiting for a GPU, median per wait (h)"),
        ("wait_for_server_hours", "user waiting until the server is ready, hours in all"),
        ("wait_total_hours", "user waiting in all: for a GPU + the notebook's start at its real length (h)"),
        ("start_seconds_median", "the notebook's start after the allocation, median (real seconds)"),
        ("waits", "waits (session starts and restarts after a cull)"),
        ("waits_after_cull", "of which restarts after a cull"),
        ("waits_never_served", "waits still without a GPU at the end of the day"),
        ("culls", "servers culled"),
        ("sessions_state_lost", "sessions whose state was lost ((b), (c): every cull; (d): not restored)"),
        ("parks", "(d) parks written by the holders"),
        ("parks_incomplete", "(d) ... of which incomplete (failed, over time)"),
        ("park_seconds_median", "(d) park, median (real seconds)"),
        ("restores_checked", "(d) later starts that checked the state"),
        ("restores_kept", "(d) ... of which found it (restored)"),
        ("restores_unknown", "(d) later starts whose check failed to run"),
        ("checks", "(d) kernel checks (every start: build or check)"),
        ("checks_not_run", "(d) ... of which did not run (a bench failure)"),
        ("restore_seconds_median", "(d) ready to state checked at a later start, median (real s)"),
        ("culls_of_busy_gpus", "culled while the GPU was in use (at the stop request)"),
        (
            "culls_noticed_during_work",
            "culls the user noticed only while at GPU work (up to a monitor poll late)",
        ),
        ("lost_work_gpu_hours", "lost work (GPU-hours of culled jobs)"),
        ("warnings", "warnings shown"),
        ("keeps", "of which answered with Keep by a user at the notebook"),
        ("keeps_on_return", "... of which on coming back to the notebook with the warning standing"),
        ("keeps_refused", "... of which refused by the hub: the cull had begun"),
        ("notebook_jobs", "notebook jobs submitted (issue 19 item 6)"),
        ("notebook_jobs_completed", "... of which completed"),
        ("notebook_job_queue_hours", "notebook jobs' wait in the team queue, hours in all"),
        ("gpu_hours_held_by_notebook_jobs", "GPU-hours held by notebook jobs (counted busy)"),
    )
    for key, name in rows:
        print(f"| {name} | " + " | ".join(f"{r[key]:g}" for r in results.values()) + " |")
    if ratios:
        print(
            "\n| ratio | GPU-hours held idle | waiting for a GPU | waiting until ready "
            "| waiting in all | lost work | state lost |"
        )
        print("|---|---|---|---|---|---|---|")
        for name, r in ratios.items():
            cells = ["-" if v is None else f"{v:.2f}" for v in r.values()]
            print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\nrerun: .venv/bin/python {cmd}")
    # A kernel check that did not run is the bench's failure (its state is neither kept nor
    # lost): reported, with why, and the run fails.
    not_run = {p: r["checks_not_run"] for p, r in results.items() if r.get("checks_not_run")}
    out["bench_failures"] = {p: [c for c in results[p]["restore_log"] if "error" in c] for p in not_run}
    for p, n in not_run.items():
        print(f"bench_idle: FAILURE: {label(p)}: {n} of {results[p]['checks']} kernel checks did not run:")
        for c in out["bench_failures"][p]:
            print(f"  {c['user']} at {c['at']} h: {c['error']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 1 if missing or not_run else 0


if __name__ == "__main__":
    raise SystemExit(main())
