"""The kubelet stand-in of the simulated GPU nodes.

It registers the shape's Nodes, has the fake NVIDIA driver (`fakedriver`)
publish their ResourceSlices, and for every pod bound to one of its nodes: gives it a unique
127.x IP, starts the container's real process where it knows the image
(jupyterhub-singleuser for notebook images, the GPU agent for holder images,
the command as given for `localcluster/exec`), gives a container the devices
of the claims it lists the way the driver's CDI spec does (NVIDIA_VISIBLE_DEVICES=void,
a fake NVML that sees only those devices), reports the pod Running
and Ready, applies the restart policy when a process exits, and finishes pod
deletion. One worker thread owns all state; a watch thread feeds it events. The nodes'
kubelet API (`kubeletserver`: container logs for `kubectl logs`) listens on each node's
address and reads where each container's output is (`log_refs`, written here).
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import importlib.util
import ipaddress
import logging
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3

from . import podspec
from .certs import PKI, issue_serving_cert
from .fakedriver import CDI_DEVICES_ENV, FakeDriver
from .fakeserve import FakeServers
from .kubeapi import ApiError, KubeAPI, Obj
from .kubeletserver import KubeletServer, LogRef, subject_access_review
from .paths import ClusterPaths
from .procs import OWNER_ENV
from .shapes import NODE_LABEL, Shape, build_node, build_node_status

log = logging.getLogger("runtime")

RESTART_BACKOFF_START = 1.0
RESTART_BACKOFF_MAX = 30.0
PROBE_PERIOD = 0.5  # seconds between tcpSocket readiness probes
RESYNC_SECONDS = 30.0
_PR_SET_PDEATHSIG = 1


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _die_with_parent() -> None:
    # The process gets SIGKILL when the runtime's worker thread dies, so pod
    # processes never outlive the runtime.
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Container:
    name: str
    mode: str
    proc: subprocess.Popen[bytes] | None = None
    started_at: str | None = None
    restart_count: int = 0
    last_terminated: Obj | None = None
    terminated: Obj | None = None  # final state when not restarted
    waiting_reason: str | None = None
    waiting_message: str | None = None
    backoff: float = RESTART_BACKOFF_START
    restart_at: float | None = None
    probe_port: int | None = None  # a tcpSocket readinessProbe
    probed_ready: bool = False
    probed_at: float = 0.0

    @property
    def running(self) -> bool:
        if self.mode == podspec.NONE or self.mode in podspec.FAKE_MODES:
            return self.terminated is None and self.waiting_reason is None
        return self.proc is not None and self.proc.poll() is None

    @property
    def ready(self) -> bool:
        return self.running and (self.probe_port is None or self.probed_ready)


@dataclass
class PodRun:
    uid: str
    namespace: str
    name: str
    node: str
    ip: str
    host_ip: str
    restart_policy: str
    pod: Obj
    containers: dict[str, Container] = field(default_factory=dict)
    start_time: str = field(default_factory=now_iso)
    kill_deadline: float | None = None
    deleting: bool = False
    phase: str = "Running"
    devices: dict[str, str] = field(default_factory=dict)  # container -> NVIDIA_VISIBLE_DEVICES
    # A status the apiserver has not taken yet (it was down): sent again each tick until it is,
    # as a kubelet's status manager does; otherwise a change seen during an apiserver restart
    # (a container that became ready) would never be reported.
    unreported: bool = False


class IPAllocator:
    """Unique pod IPs in a block of 127/8 (all loopback on Linux): 127.<first>.0.1 upwards,
    through 4 values of the second octet. Clusters on other port bases get other blocks, so
    two local clusters on one machine never hand out the same address."""

    BLOCK = 4

    def __init__(self, first: int = 1) -> None:
        self._start = int(ipaddress.IPv4Address(f"127.{first}.0.1"))
        self._end = int(ipaddress.IPv4Address(f"127.{first + self.BLOCK - 1}.255.254"))
        self._next = self._start
        self._used: set[str] = set()

    @classmethod
    def for_port_base(cls, base: int, default_base: int = 16443) -> IPAllocator:
        """127.1.x.x for the default port base, a block of its own for any other (up to 127.196)."""
        return cls(1 + (((base - default_base) // 5) % 49) * cls.BLOCK)

    def take(self, ip: str) -> None:
        self._used.add(ip)

    def allocate(self) -> str:
        while True:
            ip = ipaddress.IPv4Address(self._next)
            self._next += 1
            if self._next > self._end:
                self._next = self._start
            last = int(ip) & 0xFF
            if last in (0, 255) or str(ip) in self._used:
                continue
            self._used.add(str(ip))
            return str(ip)

    def release(self, ip: str) -> None:
        self._used.discard(ip)


class Runtime:
    def __init__(self, api: KubeAPI, shape: Shape, paths: ClusterPaths, kubelet_port: int = 0):
        self.api = api
        self.kubelet_port = kubelet_port
        # (namespace, pod, container) -> where its output is; read by the kubelet server's threads.
        self.log_refs: dict[tuple[str, str, str], LogRef] = {}
        self._kubelet_server: KubeletServer | None = None
        self.shape = shape
        self.paths = paths
        self.nodes = {n.name: n for n in shape.nodes}
        self.driver = FakeDriver(api, shape, paths)
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.pods: dict[str, PodRun] = {}
        # Pods that cannot start yet (claims not reserved): uid -> (retry time, latest pod).
        self.pending: dict[str, tuple[float, Obj]] = {}
        # Pods whose last delete (grace 0) the apiserver did not take (a restart, a 5xx): tried
        # again every tick, as a kubelet retries, or they would stay Terminating for good.
        self.undeleted: dict[str, tuple[str, str]] = {}
        self.ips = IPAllocator.for_port_base(_port_of(api))
        self.stopping = threading.Event()
        try:
            agent = importlib.util.find_spec("gpusessions.agent") is not None
        except ModuleNotFoundError:
            agent = False
        self.holder_argv = podspec.python_argv("gpusessions.agent" if agent else "localcluster.idle")
        self.bin_dir = str(Path(sys.executable).parent)
        self.driver.write_fake_nvml()
        self._fakes: FakeServers | None = None  # started with the first benchmark pod

    # -- node registration (a kubelet's) and the driver's slices -------------
    def publish(self) -> None:
        ts = now_iso()
        # Nodes taken out of the fleet (localcluster.faults.node_removed): a machine that is gone
        # has no kubelet to register it again.
        try:
            removed = set(self.paths.removed_nodes.read_text().split())
        except OSError:
            removed = set()
        # One list, then only what is missing or not Ready (1,000-node shapes: no call per node).
        ready = removed | {
            n["metadata"]["name"]
            for n in self.api.list("Node", label_selector=f"{NODE_LABEL}=true")["items"]
            if _node_ready(n)
        }
        for node in self.shape.nodes:
            if node.name in ready:
                continue
            if self.api.get_or_none("Node", node.name) is None:
                with contextlib.suppress(ApiError):
                    self.api.create(build_node(node))
            self.api.patch(
                "Node", node.name, build_node_status(node, ts, self.kubelet_port), subresource="status"
            )
        self.driver.publish()
        # Nodes of an earlier shape that this one lacks.
        for n in self.api.list("Node", label_selector=f"{NODE_LABEL}=true")["items"]:
            if n["metadata"]["name"] not in self.nodes:
                self.api.delete("Node", n["metadata"]["name"])

    # -- threads ---------------------------------------------------------------
    def _watch_pods(self) -> None:
        rv: str | None = None
        while not self.stopping.is_set():
            try:
                if rv is None:
                    lst = self.api.list("Pod")
                    rv = lst["metadata"]["resourceVersion"]
                    seen = set()
                    for p in lst["items"]:
                        seen.add(p["metadata"]["uid"])
                        self.events.put(("pod", ("SYNC", p)))
                    self.events.put(("resync", seen))
                for etype, obj in self.api.watch("Pod", resource_version=rv, timeout_seconds=240):
                    if etype == "BOOKMARK":
                        rv = obj["metadata"]["resourceVersion"]
                        continue
                    if etype == "ERROR":
                        rv = None
                        break
                    rv = obj["metadata"]["resourceVersion"]
                    self.events.put(("pod", (etype, obj)))
            except Exception as e:  # the apiserver restarts in fault tests: keep going
                log.warning("pod watch interrupted: %s; re-listing in 1s", e)
                rv = None
                time.sleep(1)

    def _resync_driver(self) -> None:
        while not self.stopping.wait(RESYNC_SECONDS):
            try:
                self.publish()
            except Exception as e:
                log.warning("republishing nodes and slices failed: %s", e)

    def serve_kubelet_api(self) -> None:
        """Each node's kubelet API on its address: a serving certificate of the cluster CA for
        all the nodes' addresses, client certificates of that CA required."""
        if not self.kubelet_port:
            return
        pki = PKI(self.paths.pki)
        ips = {n.ip: n.name for n in self.shape.nodes}
        issue_serving_cert(
            pki, "devcluster-kubelet", tuple(ips.values()), tuple(ips), pki.kubelet_crt, pki.kubelet_key
        )
        self._kubelet_server = KubeletServer(
            ips,
            self.kubelet_port,
            pki.kubelet_crt,
            pki.kubelet_key,
            pki.ca_crt,
            self.log_refs,
            self._log_file,
            subject_access_review(self.api),
        )
        try:
            self._kubelet_server.start()
        except OSError as e:
            # A huge shape (1,000 nodes: one socket each) may meet the open-files limit: pods
            # still run; only their logs (pods/log, kubectl logs) are not served.
            log.warning("kubelet API not served (pod logs unavailable): %s", e)
            self._kubelet_server = None
            return
        log.info("kubelet API on port %d of %d node address(es)", self.kubelet_port, len(ips))

    def _log_file(self, namespace: str, pod: str, container: str) -> Path:
        return self.paths.pod_logs / f"{namespace}_{pod}_{container}.log"

    def run(self) -> None:
        self.serve_kubelet_api()
        self.publish()
        log.info("published %d node(s) of shape %s", len(self.nodes), self.shape.name)
        threading.Thread(target=self._watch_pods, daemon=True, name="watch").start()
        threading.Thread(target=self._resync_driver, daemon=True, name="driver").start()
        signal.signal(signal.SIGTERM, lambda *_: self.stopping.set())
        signal.signal(signal.SIGINT, lambda *_: self.stopping.set())
        while not self.stopping.is_set():
            try:
                kind, payload = self.events.get(timeout=0.2)
            except queue.Empty:
                kind, payload = "tick", None
            try:
                if kind == "pod":
                    self._on_pod(*payload)
                elif kind == "resync":
                    self._on_resync(payload)
                self._tick()
            except Exception:
                log.exception("error handling %s", kind)
        self.shutdown()

    def shutdown(self) -> None:
        log.info("stopping all pod processes")
        if self._kubelet_server is not None:
            self._kubelet_server.close()
        for r in self.pods.values():
            self._close_fakes(r)
        procs = [c.proc for r in self.pods.values() for c in r.containers.values() if c.proc]
        for p in procs:
            _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            time.sleep(0.1)
        for p in procs:
            _signal_group(p, signal.SIGKILL)

    # -- pod events ------------------------------------------------------------
    def _ours(self, pod: Obj) -> bool:
        return pod["spec"].get("nodeName") in self.nodes

    def _on_resync(self, seen: set[str]) -> None:
        for uid in list(self.pods):
            if uid not in seen:
                self._forget(uid)

    def _on_pod(self, etype: str, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        if etype == "DELETED":
            self._forget(uid)
            return
        if not self._ours(pod):
            return
        run = self.pods.get(uid)
        if run:
            before = run.pod["metadata"]
            run.pod = pod
            if not run.deleting and (
                before.get("annotations") != pod["metadata"].get("annotations")
                or before.get("labels") != pod["metadata"].get("labels")
            ):
                self._refresh_volumes(run)
        if pod["metadata"].get("deletionTimestamp"):
            self._begin_delete(pod, run)
            return
        if run is None and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            self._start_pod(pod)

    def _forget(self, uid: str) -> None:
        run = self.pods.pop(uid, None)
        self.pending.pop(uid, None)
        self.undeleted.pop(uid, None)
        if run:
            self._close_fakes(run)
            for c in run.containers.values():
                if c.proc and c.proc.poll() is None:
                    _signal_group(c.proc, signal.SIGKILL)
                    # Reap it: a pod deleted at once must not leave zombies behind.
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        c.proc.wait(timeout=5)
            self.ips.release(run.ip)
            self._drop_logs(run)

    def _drop_logs(self, run: PodRun) -> None:
        for c in run.containers:
            ref = self.log_refs.get((run.namespace, run.name, c))
            if ref is not None and ref.uid == run.uid:
                ref.running = False
                del self.log_refs[(run.namespace, run.name, c)]

    def _begin_delete(self, pod: Obj, run: PodRun | None) -> None:
        md = pod["metadata"]
        if run is None:
            # Never started here (or finished): nothing to stop.
            if _job_pod(pod) and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                self._terminal(md["namespace"], md["name"], {"phase": "Failed"})
            if not self._finish_delete(md["namespace"], md["name"], md["uid"]):
                self.undeleted[md["uid"]] = (md["namespace"], md["name"])
            return
        if run.deleting:
            return
        run.deleting = True
        grace = int(md.get("deletionGracePeriodSeconds") or 0)
        run.kill_deadline = time.monotonic() + grace
        self._close_fakes(run)
        for c in run.containers.values():
            c.restart_at = None
            if c.proc and c.proc.poll() is None:
                _signal_group(c.proc, signal.SIGTERM)
        self._event(pod, "Killing", f"Stopping containers (grace period {grace}s)")

    def _finish_delete(self, namespace: str, name: str, uid: str) -> bool:
        """The pod's final delete; False when the apiserver did not take it (try again)."""
        try:
            self.api.delete("Pod", name, namespace, grace_period=0, uid=uid)
        except ApiError as e:
            if e.status == 409:  # the uid precondition: this pod is gone, a new one has the name
                return True
            log.warning("pod %s/%s: its final delete failed (%s); trying again", namespace, name, e)
            return False
        except Exception as e:  # the apiserver unreachable (a restart)
            log.warning("pod %s/%s: its final delete failed (%s); trying again", namespace, name, e)
            return False
        return True

    # -- starting --------------------------------------------------------------
    def _lookup(self, kind: str, namespace: str, name: str) -> dict[str, str] | None:
        obj = self.api.get_or_none(kind, name, namespace)
        if obj is None:
            return None
        if kind == "Secret":
            return podspec.decode_secret(obj)
        return {str(k): str(v) for k, v in (obj.get("data") or {}).items()}

    def _visible_devices(self, pod: Obj, container: Obj) -> str | None:
        """NVIDIA_VISIBLE_DEVICES for a container, None if it lists no GPU claim.

        Raises LookupError while a claim is not yet allocated and reserved.
        """
        refs = podspec.container_claims(container)
        if not refs:
            return None
        uuids: list[str] = []
        for ref in refs:
            cname = podspec.claim_name(pod, ref.pod_claim)
            if cname is None:
                raise LookupError(f"claim {ref.pod_claim} has no ResourceClaim yet")
            claim = self.api.get_or_none("ResourceClaim", cname, pod["metadata"]["namespace"])
            if claim is None or not podspec.claim_ready_for(claim, pod["metadata"]["uid"]):
                raise LookupError(f"ResourceClaim {cname} is not allocated and reserved for the pod")
            for driver, pool, device in podspec.allocated_devices(claim, ref.request):
                uuid = self.driver.visible_uuid(driver, pool, device)
                if uuid:
                    uuids.append(uuid)
        return ",".join(uuids) if uuids else None

    def _start_pod(self, pod: Obj) -> None:
        md = pod["metadata"]
        uid = md["uid"]
        retry = self.pending.get(uid)
        if retry and time.monotonic() < retry[0]:
            self.pending[uid] = (retry[0], pod)
            return
        node = self.nodes[pod["spec"]["nodeName"]]
        try:
            devices = {c["name"]: self._visible_devices(pod, c) for c in pod["spec"]["containers"]}
        except LookupError as e:
            log.info("pod %s/%s waits: %s", md["namespace"], md["name"], e)
            self.pending[uid] = (time.monotonic() + 1.0, pod)
            return
        self.pending.pop(uid, None)
        old_ip = (pod.get("status") or {}).get("podIP")
        if old_ip:
            self.ips.take(old_ip)
        run = PodRun(
            uid=uid,
            namespace=md["namespace"],
            name=md["name"],
            node=node.name,
            ip=old_ip or self.ips.allocate(),
            host_ip=node.ip,
            restart_policy=pod["spec"].get("restartPolicy", "Always"),
            pod=pod,
            devices={k: v for k, v in devices.items() if v},
        )
        prior = {
            s["name"]: s.get("restartCount", 0)
            for s in (pod.get("status") or {}).get("containerStatuses") or []
        }
        self.pods[uid] = run
        for c in pod["spec"]["containers"]:
            cont = Container(name=c["name"], mode=podspec.image_mode(c.get("image", "")))
            if old_ip:
                # A runtime restart loses the processes, as a node reboot would.
                cont.restart_count = prior.get(c["name"], 0) + (1 if cont.mode != podspec.NONE else 0)
            run.containers[c["name"]] = cont
            self._start_container(run, c, cont)
        self._report(run)

    def _pod_home(self, run: PodRun) -> Path:
        home = self.paths.pods / f"{run.namespace}_{run.name}_{run.uid[:8]}"
        home.mkdir(parents=True, exist_ok=True)
        return home

    def _user_home(self, run: PodRun) -> Path | None:
        """A notebook-image container of a user's pod (notebook, or kernels in the holder) gets
        that user's server home, kept across pods like the home volume z2jh gives each user."""
        labels = run.pod["metadata"].get("labels") or {}
        user = labels.get("hub.jupyter.org/username")
        if not user:
            return None
        server = labels.get("hub.jupyter.org/servername", "")
        home = self.paths.homes / run.namespace / (f"{user}--{server}" if server else user)
        home.mkdir(parents=True, exist_ok=True)
        return home

    def _start_container(self, run: PodRun, spec: Obj, cont: Container) -> None:
        cont.waiting_reason = cont.waiting_message = None
        cont.started_at = now_iso()
        cont.probe_port = podspec.tcp_probe_port(spec)
        cont.probed_ready = False
        if cont.mode == podspec.NONE:
            return
        if cont.mode in podspec.FAKE_MODES:
            self._start_fake(run, spec, cont)
            return
        pod = run.pod
        as_root = os.geteuid() == 0
        argv = podspec.container_argv(spec, cont.mode, self.holder_argv, as_root)
        try:
            env = podspec.container_env(pod, spec, run.ip, run.host_ip, self._lookup)
        except (ApiError, podspec.ConfigError) as e:
            self._fail_start(run, cont, "CreateContainerConfigError", str(e))
            return
        home = self._pod_home(run)
        user_home = self._user_home(run) if cont.mode == podspec.SINGLEUSER else None
        base = {
            "PATH": f"{self.bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(user_home or home),
            "LANG": "C.UTF-8",
            "HOSTNAME": run.name,
            "PYTHONUNBUFFERED": "1",
            "JUPYTER_RUNTIME_DIR": str(home / ".runtime"),
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            OWNER_ENV: os.environ.get(OWNER_ENV, str(self.paths.root)),
            "DEVCLUSTER_POD_IP": run.ip,
        }
        mounts = self._project_volumes(run, spec, home)
        full = {**base, **env}
        values = podspec.map_paths(podspec.bind_to_pod_ip(list(full.values()), run.ip), mounts)
        full = dict(zip(full, values, strict=True))
        dev = run.devices.get(cont.name)
        if dev:
            # What the driver's CDI spec gives a container: the devices' nodes (here: a fake
            # NVML that sees only them) and NVIDIA_VISIBLE_DEVICES=void, never the UUIDs.
            full["NVIDIA_VISIBLE_DEVICES"] = "void"
            full[CDI_DEVICES_ENV] = dev
        if cont.mode == podspec.HOLDER:
            full["GPUSESSIONS_FAKE_NVML"] = self.driver.container_nvml(
                run.node, f"{run.uid}-{cont.name}", dev.split(",") if dev else []
            )
        # $(VAR) in command and args from the container's env, as a kubelet expands them.
        argv = [podspec.expand(a, env) for a in argv]
        argv = podspec.map_paths(podspec.bind_to_pod_ip(argv, run.ip), mounts)
        exe = shutil.which(argv[0], path=full["PATH"]) if argv else None
        if not exe:
            self._fail_start(
                run, cont, "StartError", f"executable not found: {argv[0] if argv else '(none)'}"
            )
            return
        logf = self._log_file(run.namespace, run.name, cont.name)
        logf.parent.mkdir(parents=True, exist_ok=True)
        key = (run.namespace, run.name, cont.name)
        before = self.log_refs.get(key)
        with open(logf, "ab") as out:
            ended = out.tell()
            # kubeletserver.START_MARKER: the kubelet API serves what follows this line.
            out.write(f"==== {now_iso()} start (restart {cont.restart_count}): {' '.join(argv)}\n".encode())
            out.flush()
            previous = (before.start, ended) if before is not None and before.uid == run.uid else None
            if before is not None:
                before.running = False
            ref = LogRef(run.uid, logf, out.tell(), previous)
            self.log_refs[key] = ref
            cont.proc = subprocess.Popen(
                [exe, *argv[1:]],
                env=full,
                cwd=str(user_home or home),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        log.info(
            "started %s/%s:%s pid %d ip %s devices %s",
            run.namespace,
            run.name,
            cont.name,
            cont.proc.pid,
            run.ip,
            dev or "-",
        )
        self._event(pod, "Started", f"Started container {cont.name} (pid {cont.proc.pid}, IP {run.ip})")

    def _start_fake(self, run: PodRun, spec: Obj, cont: Container) -> None:
        """A benchmark container: the shared server listens on the pod IP and its first port."""
        port = podspec.first_port(spec)
        if port is None:
            self._fail_start(run, cont, "StartError", f"{cont.mode} needs a containerPort")
            return
        if self._fakes is None:
            self._fakes = FakeServers()
        dev = run.devices.get(cont.name)
        try:
            self._fakes.open(f"{run.uid}/{cont.name}", run.ip, port, cont.mode, dev.split(",") if dev else [])
        except OSError as e:
            self._fail_start(run, cont, "StartError", f"cannot listen on {run.ip}:{port}: {e}")
            return
        log.info(
            "serving %s/%s:%s (%s) on %s:%d", run.namespace, run.name, cont.name, cont.mode, run.ip, port
        )

    def _close_fakes(self, run: PodRun) -> None:
        if self._fakes is not None:
            for cont in run.containers.values():
                if cont.mode in podspec.FAKE_MODES:
                    self._fakes.close(f"{run.uid}/{cont.name}")

    def _project_volumes(self, run: PodRun, spec: Obj, home: Path) -> dict[str, str]:
        """Write downwardAPI/configMap/secret volume files under the pod folder; mountPath -> folder."""
        mounts: dict[str, str] = {}
        for mount, files in podspec.volume_files(run.pod, spec, self._lookup).items():
            target = home / "volumes" / spec["name"] / mount.strip("/")
            target.mkdir(parents=True, exist_ok=True)
            for rel, content in files.items():
                f = (target / rel).resolve()
                if target.resolve() in f.parents:
                    f.parent.mkdir(parents=True, exist_ok=True)
                    f.write_text(content)
            mounts[mount] = str(target)
        return mounts

    def _refresh_volumes(self, run: PodRun) -> None:
        """A kubelet rewrites downwardAPI volume files when the pod's labels or annotations
        change (a holder's session annotation is set once its claim is allocated)."""
        home = self._pod_home(run)
        for spec in run.pod["spec"]["containers"]:
            with contextlib.suppress(ApiError, OSError, podspec.ConfigError):
                self._project_volumes(run, spec, home)

    def _fail_start(self, run: PodRun, cont: Container, reason: str, message: str) -> None:
        cont.proc = None
        cont.started_at = None
        self._on_exit(run, cont, 128, reason, message)
        self._event(run.pod, "Failed", f"Error: {message}", "Warning")

    # -- process exits, restarts and deletion deadlines --------------------------
    def _on_exit(self, run: PodRun, cont: Container, code: int, reason: str, message: str = "") -> None:
        term = {
            "exitCode": code,
            "reason": reason,
            "message": message,
            "startedAt": cont.started_at or now_iso(),
            "finishedAt": now_iso(),
        }
        cont.proc = None
        ref = self.log_refs.get((run.namespace, run.name, cont.name))
        if ref is not None and ref.uid == run.uid:
            ref.running = False
        policy = run.restart_policy
        if not run.deleting and (policy == "Always" or (policy == "OnFailure" and code != 0)):
            cont.last_terminated = term
            cont.waiting_reason = "CrashLoopBackOff"
            cont.waiting_message = f"back-off {cont.backoff:.0f}s restarting failed container {cont.name}"
            cont.restart_at = time.monotonic() + cont.backoff
            self._event(
                run.pod, "BackOff", f"Back-off restarting container {cont.name} (exit code {code})", "Warning"
            )
            cont.backoff = min(cont.backoff * 2, RESTART_BACKOFF_MAX)
        else:
            cont.terminated = term

    def _tick(self) -> None:
        now = time.monotonic()
        for uid, (namespace, name) in list(self.undeleted.items()):
            if self._finish_delete(namespace, name, uid):
                self.undeleted.pop(uid, None)
        for uid, (when, pod) in list(self.pending.items()):
            if now >= when and uid not in self.pods:
                fresh = self._fresh(pod)
                if fresh is None:
                    self.pending.pop(uid, None)
                else:
                    self.pending[uid] = (0.0, fresh)
                    self._on_pod("MODIFIED", fresh)
        for run in list(self.pods.values()):
            changed = False
            for cont in run.containers.values():
                if cont.proc is not None and cont.proc.poll() is not None:
                    code = cont.proc.returncode
                    if code < 0:
                        code = 128 - code
                    self._on_exit(run, cont, code, "Completed" if code == 0 else "Error")
                    changed = True
                if cont.probe_port is not None and cont.running and now - cont.probed_at >= PROBE_PERIOD:
                    cont.probed_at = now
                    ok = _tcp_open(run.ip, cont.probe_port)
                    if ok != cont.probed_ready:
                        cont.probed_ready = ok
                        changed = True
                if cont.restart_at is not None and now >= cont.restart_at and not run.deleting:
                    cont.restart_at = None
                    cont.restart_count += 1
                    spec = next(c for c in run.pod["spec"]["containers"] if c["name"] == cont.name)
                    self._start_container(run, spec, cont)
                    changed = True
            if run.deleting:
                alive = [c for c in run.containers.values() if c.proc and c.proc.poll() is None]
                if alive and run.kill_deadline is not None and now >= run.kill_deadline:
                    for c in alive:
                        if c.proc:
                            _signal_group(c.proc, signal.SIGKILL)
                    run.kill_deadline = None
                if not alive:
                    if _job_pod(run.pod):
                        # As a kubelet does: a deleted pod ends in a terminal phase (its conditions,
                        # e.g. the scheduler's DisruptionTarget, kept), which the Job controller waits
                        # for before it counts the pod under a podFailurePolicy.
                        self._terminal(run.namespace, run.name, self._status(run))
                    if not self._finish_delete(run.namespace, run.name, run.uid):
                        continue  # the next tick tries again
                    self.ips.release(run.ip)
                    self._drop_logs(run)
                    self.pods.pop(run.uid, None)
                continue
            if changed or run.unreported:
                self._report(run)

    def _fresh(self, pod: Obj) -> Obj | None:
        """Re-read a waiting pod: its claim statuses may have changed without a pod event."""
        md = pod["metadata"]
        cur = self.api.get_or_none("Pod", md["name"], md["namespace"])
        return cur if cur and cur["metadata"]["uid"] == md["uid"] else None

    # -- status and events -------------------------------------------------------
    def _status(self, run: PodRun) -> Obj:
        status = podspec.pod_status(run.pod, run.containers, run.uid, run.ip, run.host_ip, run.start_time)
        if status["phase"] == "Running" and run.deleting:
            status["phase"] = "Failed"
        return status

    def _terminal(self, namespace: str, name: str, status: Obj) -> None:
        """A last status, merged by condition type and container name (strategic merge)."""
        try:
            self.api.patch(
                "Pod", name, {"status": status}, namespace, subresource="status", patch_type="strategic"
            )
        except ApiError as e:
            if e.status != 404:
                log.warning("final status of %s/%s: %s", namespace, name, e)

    def _report(self, run: PodRun) -> None:
        status = podspec.pod_status(run.pod, run.containers, run.uid, run.ip, run.host_ip, run.start_time)
        try:
            self.api.patch("Pod", run.name, {"status": status}, run.namespace, subresource="status")
        except ApiError as e:
            run.unreported = False  # answered: a 404 is a pod gone, another error is not retried
            if e.status != 404:
                log.warning("status of %s/%s: %s", run.namespace, run.name, e)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            if not run.unreported:
                log.warning("status of %s/%s not sent (%s); sending it again", run.namespace, run.name, e)
            run.unreported = True
        else:
            run.unreported = False

    def _event(self, pod: Obj, reason: str, message: str, etype: str = "Normal") -> None:
        md = pod["metadata"]
        ts = now_iso()
        ev = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{md['name']}.", "namespace": md["namespace"]},
            "involvedObject": {
                "kind": "Pod",
                "namespace": md["namespace"],
                "name": md["name"],
                "uid": md["uid"],
                "apiVersion": "v1",
            },
            "reason": reason,
            "message": message,
            "type": etype,
            "source": {"component": "devcluster-runtime", "host": pod["spec"].get("nodeName", "")},
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
        }
        # Best effort, as a kubelet's events: one lost while the apiserver is down is not sent again.
        with contextlib.suppress(ApiError, urllib3.exceptions.HTTPError, OSError):
            self.api.create(ev)


def _port_of(api: KubeAPI) -> int:
    """The apiserver's port: the cluster's port base."""
    from urllib.parse import urlparse

    return urlparse(api.creds.server).port or 16443


def _tcp_open(ip: str, port: int) -> bool:
    """A kubelet's tcpSocket probe: something accepts connections there."""
    try:
        with socket.create_connection((ip, port), timeout=0.3):
            return True
    except OSError:
        return False


def _signal_group(p: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(p.pid, sig)
    with contextlib.suppress(OSError):
        p.send_signal(sig)


def _job_pod(pod: Obj) -> bool:
    """A pod of a Job (the Job controller tracks it with a finalizer until it is terminal)."""
    return any(r.get("kind") == "Job" for r in pod["metadata"].get("ownerReferences") or [])


def _node_ready(node: Obj) -> bool:
    conds = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
