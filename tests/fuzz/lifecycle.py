"""Lifecycle fuzzer: seeded random sessions and notebook jobs on the local cluster, invariants each step.

    make fuzz SEED=<n> OPS=<n>          (or: .venv/bin/python -m tests.fuzz.lifecycle --seed 1 --ops 500)

A real JupyterHub with GPUSessionSpawner and the culler (short keep time), on the local
cluster (shape small: few GPUs, so users compete and some wait in vain), scheduled by the
real KAI Scheduler: every user is in one of two team queues (notebook jobs need one, and
sessions and jobs must share one scheduler's view of the devices), the first two users in
the owning team (a GPU quota of 2 in KAI's units: one whole-GPU session), the others in a
borrowing team (quota 0: whole-GPU sessions wait in vain, MIG slices cost no quota in KAI,
jobs run as `train` on idle GPUs). Operations, drawn
from the seed: start (a random profile, so also profile changes), stop, restart, release,
delete a named server, delete a user, hub restart, kill a holder's process, kill a
notebook's process (or the holder's kernel host); parking (kernels in the holder, parking on:
the defaults): park (a notebook's kernel gets the user's name and a mark, and the user's
"Park my session" releases the GPU: the holder parks as it goes), park during a stop (the
holder is deleted, as KAI or a drain does, and the server is stopped while it parks), restore
(the next start restores the parked kernels; each must hold its own user's name and one of
that user's marks); notebook jobs: submit (through the hub's
job endpoint with the user's token: a random size, CPU only included, sometimes 2 workers,
a run of 1 s to a minute), cancel (delete) one, delete the user mid-job, and preempt (a
borrowing team's whole-GPU job runs, then an owner's non-preemptible whole-GPU session
takes the GPU back: KAI evicts the job's pod). The culler runs its cycles beside them
(every 2 s, releasing a stopped server's GPU after 20 s). After every step, once things
settle (at most `--settle` seconds), it checks:

1. every claim belongs to a hub user and server that exist, and a stopped server's claim
   is released within the culler's keep time (plus slack);
2. no holder without its claim, no claim without its holder;
3. a running server with a GPU has an allocated claim and its notebook pod sits on the
   claim's node;
4. no device is allocated to two claims;
5. the hub and the cluster agree: a running server has its notebook pod, a stopped one has none;
6. no job object (Job, pod, ResourceClaim, ResourceClaimTemplate) outlives its user;
7. a preempted job is requeued, not failed, up to the requeue limit (1 here) and failed past
   it, with the hub's words for both; no job fails otherwise (these notebooks do not raise);
8. no parked state outlives its user: a deleted user's homes hold no parks, a deleted named
   server's home none of that server (the spawner's `delete_forever` runs a cleanup pod as
   the user); and (checked by the restore operation) no restore runs in another user's
   kernel: each restored kernel is in its own user's server and holds that user's name and
   a mark that user parked (never one of an earlier user of the same name).

Device check 4 covers every claim of the cluster: sessions' and jobs'. At the end every
user with a job is deleted, and nothing of any job may be left.

The sequence of operations is reproducible from the seed (`plan`; their timing is the machine's).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tornado.httpclient import HTTPClientError

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT / "spawner", ROOT / "devcluster", ROOT):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from tests.integration.hubtools import GPU_HUB_CONFIG, container_pid, nb, open_notebook  # noqa: E402
from tests.integration.kaitools import make_queues, queue  # noqa: E402
from tests.integration.kerneltools import execute  # noqa: E402

from localcluster import waits  # noqa: E402
from localcluster.hubproc import Hub, free_port, start_hub  # noqa: E402
from localcluster.kubeapi import KubeAPI  # noqa: E402
from localcluster.paths import ClusterPaths  # noqa: E402

PROFILES = ["cpu", "mig-1g-10gb", "mig-1g-10gb", "mig-3g-40gb", "gpu"]
GPU_PROFILES = {"mig-1g-10gb", "mig-3g-40gb", "gpu", "gpu-reclaim"}
STOPPED_KEEP = 20.0
CULLER_INTERVAL = 2.0
REQUEUE_LIMIT = 1
OWNERS = 2  # u0, u1: the owning team; the other users borrow
JOB_SIZES = ["cpu", "cpu", "mig-1g-10gb", "mig-3g-40gb", "gpu"]
JOB_SECONDS = [1, 5, 20, 60]
JOB_SELECTOR = "gpusessions.io/component=job"
USER_LABEL = "hub.jupyter.org/username"
DISRUPTION = "DisruptionTarget"
# A notebook job: sleeps `seconds` (a papermill parameter), then says so.
JOB_NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "metadata": {"tags": ["parameters"]},
            "source": "seconds = 1",
            "outputs": [],
            "execution_count": None,
        },
        {
            "cell_type": "code",
            "metadata": {},
            "source": "import time\ntime.sleep(seconds)\nprint('slept', seconds)",
            "outputs": [],
            "execution_count": None,
        },
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}
FUZZ_CONFIG = f"""
c.GPUSessionSpawner.gpu_allocation_timeout = 6
c.KubeSpawner.start_timeout = 60
from gpusessions.hub.cullerservice import configure_culler
configure_culler(c, admins=["admin"], port={{port}}, args=["--interval", "{CULLER_INTERVAL:g}",
    "--stopped-keep", "{STOPPED_KEEP:g}", "--idle-limit", "100000", "--warn-before", "5",
    "--orphan-grace", "10"])
# The hub exits when its managed culler does not answer within the service's timeout (30 s by
# default): on a loaded machine its start took 48 s. Not what this fuzzer is about.
c.JupyterHub.services = [dict(s, timeout=120) for s in c.JupyterHub.services]
c.GPUSessionSpawner.kai_queue = lambda spawner: (
    {{owner_queue!r}} if spawner.user.name in {{owners!r}} else {{borrow_queue!r}})
c.NotebookJobs.requeue_limit = {REQUEUE_LIMIT}


def fuzz_profiles(spawner):
    # The owner's session that takes the whole GPU back waits for KAI to evict the job.
    return profiles(spawner) + [dict(
        display_name="Whole GPU, taken back", slug="gpu-reclaim",
        kubespawner_override=dict(gpu_device_class="gpu.nvidia.com", gpu_allocation_timeout=60),
    )]


c.KubeSpawner.profile_list = fuzz_profiles
"""
Obj = dict[str, Any]
OPS = [
    ("start", 30),
    ("stop", 14),
    ("restart", 8),
    ("release", 8),
    ("start_named", 8),
    ("delete_named", 6),
    ("delete_user", 4),
    ("hub_restart", 3),
    ("kill_holder", 5),
    ("kill_notebook", 5),
    ("wait", 4),
    ("submit_job", 10),
    ("cancel_job", 4),
    ("delete_user_mid_job", 2),
    ("preempt", 3),
    ("park", 6),
    ("park_during_stop", 3),
    ("restore", 5),
]
PARK_PROFILE = "mig-1g-10gb"  # the size a park operation starts when the user has no GPU session
PARKED = ".gpusessions/parked"


class Violation(AssertionError):
    pass


@dataclass
class Fuzz:
    api: KubeAPI
    namespace: str
    workdir: Path
    rng: random.Random
    users: list[str]
    settle: float = 45.0
    log: list[str] = field(default_factory=list)
    hub: Hub | None = None
    ports: tuple[int, int, int] | None = None
    stopped_at: dict[tuple[str, str], float] = field(default_factory=dict)
    homes: Path = field(default_factory=lambda: ClusterPaths.default().homes)
    tokens: dict[str, str] = field(default_factory=dict)
    # The marks each user's parks put in their kernels (forgotten when the user is deleted).
    marks: dict[str, set[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        suffix = self.namespace.rsplit("-", 1)[-1]
        self.dept, self.owner_queue, self.borrow_queue = (
            f"fz{k}-{suffix}" for k in ("dept", "own", "borrow")
        )
        self.owners = self.users[:OWNERS]
        self.borrowers = self.users[OWNERS:] or self.users

    def queues(self) -> list[dict[str, Any]]:
        """Parent, owning team (room for one whole-GPU session: KAI charges its claim twice,
        docs/queues.md), borrowing team (no quota, may borrow up to 2)."""
        return [
            queue(self.dept, 2, -1),
            queue(self.owner_queue, 2, 2, parent=self.dept),
            queue(self.borrow_queue, 0, 2, parent=self.dept),
        ]

    # -- hub -------------------------------------------------------------------------
    def config(self) -> str:
        return GPU_HUB_CONFIG.format(namespace=self.namespace) + FUZZ_CONFIG.format(
            port=self.culler_port,
            owners=sorted(self.owners),
            owner_queue=self.owner_queue,
            borrow_queue=self.borrow_queue,
        )

    def start_hub(self) -> None:
        self.hub = start_hub(self.config(), self.workdir, ports=self.ports, timeout=180)
        self.ports = self.hub.ports

    def h(self) -> Hub:
        assert self.hub is not None
        return self.hub

    def servers(self) -> dict[str, dict[str, Any]]:
        """user -> {server name -> model} including stopped servers."""
        code, body = self.h().api("GET", "/users?include_stopped_servers=1&limit=1000")
        assert code == 200, (code, body)
        items = body["items"] if isinstance(body, dict) and "items" in body else body
        return {u["name"]: u.get("servers") or {} for u in items}

    def server_model(self, user: str, server: str) -> dict[str, Any] | None:
        code, body = self.h().api("GET", f"/users/{user}?include_stopped_servers=1")
        if code != 200:
            return None
        return (body.get("servers") or {}).get(server)

    def path(self, user: str, server: str) -> str:
        return f"/users/{user}/servers/{server}" if server else f"/users/{user}/server"

    def settle_server(self, user: str, server: str) -> str:
        """Wait until the server is neither starting nor stopping; its state in a word."""
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            m = self.server_model(user, server)
            if m is None:
                return "absent"
            if not m.get("pending"):
                return "ready" if m.get("ready") else "stopped"
            time.sleep(0.5)
        raise Violation(f"{user}/{server} is still pending after 90 s")

    # -- operations ------------------------------------------------------------------
    def op_start(self, user: str, server: str = "") -> str:
        profile = self.rng.choice(PROFILES)
        self.h().api("POST", f"/users/{user}")
        m = self.server_model(user, server)
        if m and (m.get("ready") or m.get("pending")):
            return "already running"
        code, _ = self.h().api("POST", self.path(user, server), {"user_options": {"profile": profile}})
        state = self.settle_server(user, server)
        if state != "ready":
            self.stopped_at[(user, server)] = time.time()
        else:
            self.stopped_at.pop((user, server), None)
        return f"{profile}: {code} -> {state}"

    def op_start_named(self, user: str) -> str:
        return self.op_start(user, "exp")

    def op_stop(self, user: str, server: str = "") -> str:
        m = self.server_model(user, server)
        if not m or not (m.get("ready") or m.get("pending")):
            return "not running"
        code, _ = self.h().api("DELETE", self.path(user, server))
        state = self.settle_server(user, server)
        self.stopped_at[(user, server)] = time.time()
        return f"{code} -> {state}"

    def op_restart(self, user: str) -> str:
        m = self.server_model(user, "")
        profile = ((m or {}).get("user_options") or {}).get("profile") or self.rng.choice(PROFILES)
        if not m or not m.get("ready"):
            return "not running"
        self.op_stop(user)
        code, _ = self.h().api("POST", self.path(user, ""), {"user_options": {"profile": profile}})
        state = self.settle_server(user, "")
        if state == "ready":
            self.stopped_at.pop((user, ""), None)
        return f"{profile}: {code} -> {state}"

    def op_release(self, user: str) -> str:
        code, _ = self.h().api("POST", f"/gpusessions/users/{user}/release")
        self.settle_server(user, "")
        self.stopped_at[(user, "")] = time.time()
        return str(code)

    def op_delete_named(self, user: str) -> str:
        code, _ = self.h().api("DELETE", f"/users/{user}/servers/exp", {"remove": True})
        deadline = time.monotonic() + 90
        while code == 202 and self.server_model(user, "exp") is not None and time.monotonic() < deadline:
            time.sleep(0.5)
        self.stopped_at.pop((user, "exp"), None)
        return str(code)

    def op_delete_user(self, user: str) -> str:
        for server in ("", "exp"):
            m = self.server_model(user, server)
            if m and (m.get("ready") or m.get("pending")):
                self.op_stop(user, server)
        code, _ = self.h().api("DELETE", f"/users/{user}")
        self.tokens.pop(user, None)
        self.marks.pop(user, None)
        self.stopped_at.pop((user, ""), None)
        self.stopped_at.pop((user, "exp"), None)
        return str(code)

    def op_hub_restart(self, user: str) -> str:
        self.h().stop()
        self.start_hub()
        return "restarted"

    def _kill(self, pod: str, container: str | None) -> str:
        if self.api.get_or_none("Pod", pod, self.namespace) is None:
            return "no such pod"
        try:
            pid = container_pid(self.api, self.namespace, pod, container)
            os.kill(pid, signal.SIGKILL)
        except (AssertionError, ProcessLookupError) as e:
            return f"not killed: {str(e)[:60]}"
        return f"killed pid {pid}"

    def op_kill_holder(self, user: str) -> str:
        """The holder's agent, or its kernel host (kernels are lost; the session must go on)."""
        return self._kill(f"gpu-holder-{user}", self.rng.choice(["holder", "kernels"]))

    def op_kill_notebook(self, user: str) -> str:
        return self._kill(f"jupyter-{user}", "notebook")

    def op_wait(self, user: str) -> str:
        time.sleep(self.rng.uniform(1, STOPPED_KEEP + 5))
        return "waited"

    # -- parking -----------------------------------------------------------------------
    def _marked_kernel(self, user: str) -> str:
        """The user's default server runs a GPU session (started if not) with a notebook whose
        kernel holds the user's name and a new mark: the mark, or why there is none."""
        m = self.server_model(user, "")
        if not m or not m.get("ready") or (m.get("user_options") or {}).get("profile") not in GPU_PROFILES:
            if m and (m.get("ready") or m.get("pending")):
                self.op_stop(user)
            if not self._start_gpu(user):
                return "no GPU session"
        mark = self.rng.randrange(10**9)
        try:
            kid = open_notebook(self.h(), user, f"park-{mark}.ipynb")
            execute(self.h().url, user, kid, self.h().token, f"owner = {user!r}\nmark = {mark}\nprint('ok')")
        except (AssertionError, OSError, HTTPClientError) as e:  # a gateway restarting, say
            return f"no marked kernel: {str(e)[:60]}"
        self.marks.setdefault(user, set()).add(mark)
        return str(mark)

    def _start_gpu(self, user: str) -> bool:
        """Start the user's default server with PARK_PROFILE; True if it runs."""
        self.h().api("POST", f"/users/{user}")
        self.h().api("POST", self.path(user, ""), {"user_options": {"profile": PARK_PROFILE}})
        if self.settle_server(user, "") != "ready":
            self.stopped_at[(user, "")] = time.time()
            return False
        self.stopped_at.pop((user, ""), None)
        return True

    def _park_record(self, user: str) -> dict[str, Any] | None:
        """The default server's park waiting for its restore, once its kernels are parked."""
        try:
            path = self.homes / self.namespace / user / PARKED / "_default" / "session.json"
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        kernels = rec.get("kernels") or []
        return rec if kernels and all(k.get("status") != "parking" for k in kernels) else None

    def _parked(self, user: str) -> str:
        """The park's kernels' states, once the holder wrote them (at most a minute)."""
        try:
            rec = waits.wait_for(lambda: self._park_record(user), 60, f"{user}'s park to finish")
        except waits.WaitTimeout:
            return "no park record"
        return ",".join(sorted(str(k.get("status")) for k in rec["kernels"]))

    def op_park(self, user: str) -> str:
        """Park my session: the release of a running GPU session with a marked kernel."""
        mark = self._marked_kernel(user)
        if not mark.isdigit():
            return mark
        code, _ = self.h().api("POST", f"/gpusessions/users/{user}/release")
        self.settle_server(user, "")
        self.stopped_at[(user, "")] = time.time()
        return f"mark {mark}: release {code}, park {self._parked(user)}"

    def op_park_during_stop(self, user: str) -> str:
        """The holder is deleted (KAI's reclaim, a drain) and the server stopped while it parks."""
        mark = self._marked_kernel(user)
        if not mark.isdigit():
            return mark
        self.api.delete("Pod", f"gpu-holder-{user}", self.namespace)
        code, _ = self.h().api("DELETE", self.path(user, ""))
        state = self.settle_server(user, "")
        self.stopped_at[(user, "")] = time.time()
        return f"mark {mark}: holder deleted, stop {code} -> {state}, park {self._parked(user)}"

    def op_restore(self, user: str) -> str:
        """The next start restores the parked kernels (parked first if nothing is): every
        kernel that parked comes back, each in this user's own server, holding this user's
        name and one of their marks."""
        rec = self._park_record(user)
        if rec is None:
            parked = self.op_park(user)
            rec = self._park_record(user)
            if rec is None:
                return f"nothing parked ({parked})"
        m = self.server_model(user, "")
        if (not m or not m.get("ready")) and not self._start_gpu(user):
            return "no GPU for the start"
        nb(self.h(), "GET", f"/user/{user}/api/sessions")  # the first request restores (and waits)
        code, status = nb(self.h(), "GET", f"/user/{user}/gpusessions/restore")
        if code != 200 or not isinstance(status, dict):
            raise Violation(f"{user}'s restore status: {code} {str(status)[:200]}")
        wrong = self._restore_violations(user, rec, status)
        if wrong:
            raise Violation("; ".join(wrong))
        back = sum(bool(k.get("restored")) for k in status.get("kernels") or [])
        return f"{status.get('state')}: {back} kernel(s) back"

    def _restore_violations(self, user: str, rec: dict[str, Any], status: dict[str, Any]) -> list[str]:
        parked = {k["id"] for k in rec["kernels"] if k.get("status") == "parked"}
        by_id = {k.get("id"): k for k in status.get("kernels") or []}
        out = [
            f"{user}'s parked kernel {kid} was not restored: {status.get('message')}"
            for kid in sorted(parked)
            if not (by_id.get(kid) or {}).get("restored")
        ]
        _, mine = nb(self.h(), "GET", f"/user/{user}/api/kernels")
        own = {k["id"] for k in mine or []}
        for k in by_id.values():
            kid = k.get("kernel")
            if not k.get("restored"):
                continue
            if kid not in own:
                out.append(f"{user}'s park was restored into kernel {kid}, not one of {user}'s")
                continue
            try:
                got = execute(self.h().url, user, kid, self.h().token, "print(owner, mark)").split()
            except (AssertionError, OSError, HTTPClientError) as e:
                out.append(f"{user}'s restored kernel {kid} lacks its values: {str(e)[:80]}")
                continue
            if got[:1] != [user] or got[1:] not in [[str(x)] for x in self.marks.get(user, set())]:
                out.append(f"{user}'s restored kernel {kid} holds {got}: not {user}'s own park")
        return out

    def park_violations(self, users: set[str], hub: dict[str, dict[str, Any]]) -> list[str]:
        """8. no parked state outlives its user (or its named server)."""
        out: list[str] = []
        root = self.homes / self.namespace
        for home in sorted(root.iterdir()) if root.is_dir() else []:
            user, _, server = home.name.partition("--")
            parked = home / PARKED
            if not parked.is_dir():
                continue
            if user not in users and any(parked.iterdir()):
                left = sorted(p.name for p in parked.iterdir())
                out.append(f"parks of deleted user {user} still in {home}: {left}")
            elif server and user in users and server not in hub.get(user, {}):
                left = sorted(p.name for p in parked.iterdir() if p.name.split(".")[0] == server)
                if left:
                    out.append(f"parks of deleted server {user}/{server} still in {home}: {left}")
        return out

    # -- notebook jobs -----------------------------------------------------------------
    def jobs_api(self, user: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """The hub's job endpoints with the user's own token (made, and the user, if needed)."""
        for _ in range(2):
            if user not in self.tokens:
                self.h().api("POST", f"/users/{user}")
                code, tok = self.h().api("POST", f"/users/{user}/tokens", {"note": "fuzz"})
                if code != 201:
                    return code, tok
                self.tokens[user] = tok["token"]
            code, out = _call(self.h(), self.tokens[user], method, f"/gpusessions/users/{user}{path}", body)
            if code not in (401, 403) or "queue" in str(out):
                return code, out
            self.tokens.pop(user, None)  # the user was deleted and made again since
        return code, out

    def submit(self, user: str, size: str, workers: int, seconds: int) -> tuple[int, Any]:
        home = self.homes / self.namespace / user
        home.mkdir(parents=True, exist_ok=True)
        (home / "fuzz.ipynb").write_text(json.dumps(JOB_NOTEBOOK))
        body = {"name": "fuzz", "input": "fuzz.ipynb", "size": size, "parameters": {"seconds": seconds}}
        if workers > 1:
            body["workers"] = workers
        return self.jobs_api(user, "POST", "/jobs", body)

    def job_view(self, user: str, job_id: str) -> dict[str, Any] | None:
        code, j = self.jobs_api(user, "GET", f"/jobs/{job_id}")
        return j if code == 200 else None

    def op_submit_job(self, user: str) -> str:
        size = self.rng.choice(JOB_SIZES)
        workers = 2 if self.rng.random() < 0.2 else 1
        seconds = self.rng.choice(JOB_SECONDS)
        code, body = self.submit(user, size, workers, seconds)
        what = body.get("id") if code == 201 else str((body or {}).get("message", body))[:70]
        return f"{size} x{workers} {seconds}s: {code} {what}"

    def op_cancel_job(self, user: str) -> str:
        code, body = self.jobs_api(user, "GET", "/jobs")
        jobs = sorted(j["id"] for j in (body or {}).get("jobs") or []) if code == 200 else []
        if not jobs:
            return f"no job ({code})"
        job_id = self.rng.choice(jobs)
        view = self.job_view(user, job_id) or {}
        code, _ = self.jobs_api(user, "DELETE", f"/jobs/{job_id}")
        return f"{job_id} ({view.get('state')}): {code}"

    def op_delete_user_mid_job(self, user: str) -> str:
        code, job = self.submit(user, self.rng.choice(["cpu", "mig-1g-10gb"]), 1, 60)
        if code != 201:
            return f"submit {code}: {str((job or {}).get('message', job))[:60]}; " + self.op_delete_user(user)
        try:
            waits.wait_for(
                lambda: (self.job_view(user, job["id"]) or {}).get("state") == "running", 30, "the job to run"
            )
            state = "running"
        except waits.WaitTimeout:
            state = (self.job_view(user, job["id"]) or {}).get("state")
        return f"{job['id']} {state}; delete user: " + self.op_delete_user(user)

    def op_preempt(self, user: str) -> str:
        """A borrower's whole-GPU job runs on the idle GPU; an owner's in-quota, non-preemptible
        whole-GPU session takes it back (KAI evicts the job's pod; the job is requeued)."""
        borrower = user if user in self.borrowers else self.rng.choice(self.borrowers)
        owner = self.rng.choice(self.owners)
        code, job = self.submit(borrower, "gpu", 1, 60)
        if code != 201:
            return f"{borrower}'s job: {code} {str((job or {}).get('message', job))[:60]}"
        path = (borrower, job["id"])
        try:
            waits.wait_for(
                lambda: (self.job_view(*path) or {}).get("state") == "running", 45, "the job to run"
            )
        except waits.WaitTimeout:
            j = self.job_view(*path) or {}
            return f"{borrower}'s {job['id']} did not get the GPU: {j.get('state')}: {j.get('message')}"
        m = self.server_model(owner, "")
        if m and (m.get("ready") or m.get("pending")):
            self.op_stop(owner)
        self.h().api("POST", f"/users/{owner}")
        code, _ = self.h().api("POST", self.path(owner, ""), {"user_options": {"profile": "gpu-reclaim"}})
        state = self.settle_server(owner, "")
        if state == "ready":
            self.stopped_at.pop((owner, ""), None)
        else:
            self.stopped_at[(owner, "")] = time.time()
        j = self.job_view(*path) or {}
        return (
            f"{borrower}'s {job['id']} ran; {owner} gpu-reclaim: {code} -> {state}; "
            f"job {j.get('state')} requeues {j.get('requeues')}"
        )

    # -- invariants ------------------------------------------------------------------
    def violations(self) -> list[str]:
        ns = self.namespace
        sel = "app.kubernetes.io/managed-by=gpusessions"
        claims = [
            c
            for c in self.api.list("ResourceClaim", ns, label_selector=sel)["items"]
            if not c["metadata"].get("deletionTimestamp")
        ]
        pods = [p for p in self.api.list("Pod", ns)["items"] if not p["metadata"].get("deletionTimestamp")]
        holders = [p for p in pods if _labels(p).get("app.kubernetes.io/component") == "holder"]
        notebooks = {
            p["metadata"]["name"]: p for p in pods if _labels(p).get("gpusessions.io/component") == "notebook"
        }
        hub = self.servers()
        by_owner = {_owner(c): c for c in claims}
        out: list[str] = []
        now = time.time()
        # 1. owners, and the keep time of stopped servers
        for c in claims:
            user, server = _owner(c)
            name = c["metadata"]["name"]
            if user not in hub or (server and server not in hub[user]):
                out.append(f"claim {name}: its owner {user}/{server} is not in the hub")
                continue
            model = hub[user].get(server) or {}
            since = self.stopped_at.get((user, server))
            stopped = not model.get("ready") and not model.get("pending")
            if stopped and since is not None and now - since > STOPPED_KEEP + 4 * CULLER_INTERVAL + 15:
                out.append(f"claim {name}: kept {now - since:.0f}s after its server stopped")
        # 2. holders <-> claims
        names = {c["metadata"]["name"] for c in claims}
        held = {_annotations(h).get("gpusessions.io/claim") for h in holders}
        out += [
            f"holder {h['metadata']['name']} has no claim"
            for h in holders
            if _annotations(h).get("gpusessions.io/claim") not in names
        ]
        out += [f"claim {n} has no holder" for n in sorted(names - held)]
        # 3 and 5. running and stopped servers
        for user, servers in hub.items():
            for server, m in servers.items():
                pod_name = f"jupyter-{user}" + (f"--{server}" if server else "")
                pod = notebooks.get(pod_name)
                if m.get("ready"):
                    out += self._running(user, server, m, pod, by_owner.get((user, server)))
                elif not m.get("pending") and pod is not None:
                    out.append(f"{user}/{server} is stopped but its notebook pod {pod_name} is there")
        # 4. devices, of every claim: sessions' and jobs'
        devs = Counter(d for c in self.api.list("ResourceClaim")["items"] for d in _devices(c))
        out += [f"device {d} allocated {n} times" for d, n in devs.items() if n > 1]
        return out + self.job_violations(set(hub)) + self.park_violations(set(hub), hub)

    def job_objects(self) -> dict[str, list[dict[str, Any]]]:
        ns = self.namespace
        return {
            kind: self.api.list(kind, ns, label_selector=JOB_SELECTOR)["items"]
            for kind in ("Job", "Pod", "ResourceClaim", "ResourceClaimTemplate")
        }

    def job_violations(self, users: set[str]) -> list[str]:
        objs = self.job_objects()
        out: list[str] = []
        # 6. no job object outlives its user
        for kind, items in objs.items():
            for o in items:
                owner = _labels(o).get(USER_LABEL, "")
                if owner not in users:
                    out.append(f"{kind} {o['metadata']['name']} of deleted user {owner!r} is still there")
        # 7. preempted: requeued up to the limit, failed past it; no other failure
        pods = [p for p in objs["Pod"] if not p["metadata"].get("deletionTimestamp")]
        by_user: dict[str, list[str]] = {}
        for job in objs["Job"]:
            if job["metadata"].get("deletionTimestamp"):
                continue
            name, st = job["metadata"]["name"], job.get("status") or {}
            failed, limit = int(st.get("failed") or 0), int(job["spec"].get("backoffLimit", 0))
            cond = next(
                (c for c in st.get("conditions") or [] if c["type"] == "Failed" and c["status"] == "True"),
                None,
            )
            if cond is not None and (cond.get("reason") != "BackoffLimitExceeded" or failed <= limit):
                out.append(
                    f"Job {name} failed after {failed} preemption(s) (limit {limit}): "
                    f"{cond.get('reason')}: {cond.get('message')}"
                )
            out += [
                f"pod {p['metadata']['name']} of Job {name} failed, not preempted"
                for p in pods
                if p["metadata"]["name"].startswith(name + "-")
                and (p.get("status") or {}).get("phase") == "Failed"
                and not any(c["type"] == DISRUPTION for c in p["status"].get("conditions") or [])
            ]
            if failed:
                by_user.setdefault(_labels(job).get(USER_LABEL, ""), []).append(name.removeprefix("nbjob-"))
        # ... and the hub says so to the user
        for user, ids in by_user.items():
            if user not in users:
                continue
            for job_id in ids:
                j = self.job_view(user, job_id)
                if j is None:
                    continue
                n, state, msg = j.get("requeues", 0), j.get("state"), j.get("message", "")
                if state in ("queued", "running") and not (n <= REQUEUE_LIMIT and "requeued" in msg):
                    out.append(f"job {job_id} ({state}, {n} requeue(s)) is not shown requeued: {msg}")
                if state == "failed" and not (n > REQUEUE_LIMIT and "more than the requeue limit" in msg):
                    out.append(f"job {job_id} failed after {n} requeue(s): {msg}")
        return out

    def _running(
        self,
        user: str,
        server: str,
        m: dict[str, Any],
        pod: dict[str, Any] | None,
        claim: dict[str, Any] | None,
    ) -> list[str]:
        if pod is None:
            return [f"{user}/{server} is running but has no notebook pod"]
        profile = (m.get("user_options") or {}).get("profile")
        if profile not in GPU_PROFILES:
            return []
        if claim is None or not (claim.get("status") or {}).get("allocation"):
            return [f"{user}/{server} runs {profile} without an allocated claim"]
        node = _node(claim)
        if pod["spec"].get("nodeName") != node:
            return [f"{user}/{server}: notebook on {pod['spec'].get('nodeName')}, GPU on {node}"]
        return []

    def check(self) -> None:
        last: list[str] = []

        def ok() -> bool:
            nonlocal last
            last = self.violations()
            return not last

        try:
            waits.wait_for(ok, self.settle, "the invariants to hold", interval=1.0)
        except waits.WaitTimeout:
            raise Violation("; ".join(last)) from None

    # -- the run ---------------------------------------------------------------------
    def step(self, i: int, name: str, user: str) -> None:
        t0 = time.monotonic()
        result = getattr(self, f"op_{name}")(user)
        self.log.append(f"{i:4d} {name:13s} {user:8s} {result} ({time.monotonic() - t0:.1f}s)")
        print(self.log[-1], flush=True)
        self.check()

    def run(self, steps: list[tuple[str, str]]) -> None:
        for _ in make_queues(self.api, self.queues()):
            self._run(steps)

    def _run(self, steps: list[tuple[str, str]]) -> None:
        ops = len(steps)
        self.culler_port = free_port()
        self.start_hub()
        try:
            for i in range(ops + 1):
                try:
                    if i < ops:
                        self.step(i, *steps[i])
                    else:
                        self.finish(i)
                except Violation as v:
                    raise Violation(
                        f"step {i} ({self.log[-1] if self.log else '-'}): {v}\n"
                        f"hub log: {self.h().log}\nlast steps:\n" + "\n".join(self.log[-15:])
                    ) from None
        finally:
            if self.hub is not None:
                self.hub.stop()
            # Jobs left by a violation: gone before the queues (their pods go with the namespace).
            self.api.delete_collection("Job", self.namespace, label_selector=JOB_SELECTOR)

    def finish(self, i: int) -> None:
        """The end: every user with a job is deleted, and nothing of any job may be left."""
        users = sorted({_labels(j).get(USER_LABEL, "") for j in self.job_objects()["Job"]})
        for user in users:
            self.op_delete_user(user)
        self.log.append(f"{i:4d} {'end':13s} {'-':8s} deleted the users with jobs: {users}")
        print(self.log[-1], flush=True)
        self.check()
        left = {k: [o["metadata"]["name"] for o in v] for k, v in self.job_objects().items() if v}
        if left:
            raise Violation(f"job objects left after their users were deleted: {left}")


def _call(hub: Hub, token: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    return hub.api(method, path, body, token=token)


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("labels") or {}


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


def _owner(claim: dict[str, Any]) -> tuple[str, str]:
    ann = _annotations(claim)
    return ann.get("gpusessions.io/user", ""), ann.get("gpusessions.io/server", "")


def _node(claim: dict[str, Any]) -> str | None:
    terms = claim["status"]["allocation"].get("nodeSelector", {}).get("nodeSelectorTerms") or []
    for t in terms:
        for f in t.get("matchFields") or []:
            if f.get("key") == "metadata.name":
                return str(f["values"][0])
    return None


def _devices(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return [(r["driver"], r["pool"], r["device"]) for r in (alloc.get("devices") or {}).get("results") or []]


def plan(seed: int, ops: int, users: int) -> list[tuple[str, str]]:
    """The operations and their users, from the seed alone (what the operations draw inside,
    a profile or a size, comes from a second generator of the same seed): a seed's sequence
    does not depend on what the cluster did."""
    rng = random.Random(f"plan-{seed}")
    names, weights = [n for n, _ in OPS], [w for _, w in OPS]
    return [(rng.choices(names, weights=weights)[0], f"u{rng.randrange(users)}") for _ in range(ops)]


def run(api: KubeAPI, namespace: str, workdir: Path, seed: int, ops: int, users: int) -> list[str]:
    fz = Fuzz(api, namespace, workdir, random.Random(seed), [f"u{i}" for i in range(users)])
    fz.run(plan(seed, ops, users))
    return fz.log


def main(argv: list[str] | None = None) -> int:
    from localcluster import cluster as lc
    from localcluster.paths import ClusterPaths

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ops", type=int, default=500)
    ap.add_argument("--users", type=int, default=20)
    args = ap.parse_args(argv)
    paths = ClusterPaths.default()
    started = not lc.healthy(paths)
    lc.up("small", paths=paths)
    api = KubeAPI.from_kubeconfig(paths.kubeconfig)
    ns = f"fuzz-{args.seed}-{int(time.time())}"
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    t0 = time.monotonic()
    try:
        log = run(api, ns, Path(tempfile.mkdtemp(prefix="fuzz-")), args.seed, args.ops, args.users)
    except Violation as v:
        print(f"\nFAILED (seed {args.seed}): {v}", file=sys.stderr)
        return 1
    finally:
        api.delete_collection("Pod", ns, grace_period=0)
        api.delete("Namespace", ns)
        if started:
            lc.down(paths)
    kinds = Counter(line.split()[1] for line in log)
    print(
        json.dumps(
            {"seed": args.seed, "ops": len(log), "seconds": round(time.monotonic() - t0), "by_op": kinds}
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
