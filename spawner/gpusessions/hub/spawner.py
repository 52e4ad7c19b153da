"""The gpusessions spawner.

`GPUSessionSpawner` (JupyterHub spawner `gpusessions`) is a KubeSpawner whose
GPU profiles get a long-lived DRA ResourceClaim held by a small holder pod, so
the same GPU (and node) comes back after a stop, a crash or a restart. A
profile without a GPU spawns exactly as with KubeSpawner.

This module holds the JupyterHub hooks only: the settings are in `spawnersettings.py`,
a start's GPU phase in `lifecycle.py` (over `session.py`'s claim and holder lifecycle and
`kernelhost.py`'s kernel host), the poll's healing and reclaim handling in `reconcile.py`,
the claim and holder in `core/claims.py`, the notebook pod's GPU parts in
`core/notebook_pod.py`, the GPU request of a profile in `core/requests.py`, the scheduler's
queues in `core/queues.py` (`QueuePolicy`) and option validation in `core/options.py`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from jupyterhub.spawner import SpawnException
from jupyterhub.utils import maybe_future
from traitlets import TraitError, default

from gpusessions.core import claims as C
from gpusessions.core import kernels as K
from gpusessions.core import labels as L
from gpusessions.core import notebook_pod as NP
from gpusessions.core import scopes as S
from gpusessions.core.options import InvalidOptions
from gpusessions.core.options import validate as validate_options
from gpusessions.core.placement import affinity_of, pull_secrets
from gpusessions.core.queues import QueuePolicy
from gpusessions.core.requests import GPU_SETTINGS, InvalidSettings, request_from
from gpusessions.hub import health, kernelsettings, lifecycle, notices, parkcleanup
from gpusessions.hub.admission import Admission
from gpusessions.hub.notebookpark import NotebookParking
from gpusessions.hub.picker import figures_for, render_form
from gpusessions.hub.reconcile import Reconcile
from gpusessions.hub.session import Allocation, GPUSession, Refused, SessionNames
from gpusessions.hub.spawnersettings import KEPT_SETTINGS, GPUSessionSettings, allocation_wait
from gpusessions.kube import watch
from gpusessions.kube.api import KubeError, SessionAPI

__all__ = ["KEPT_SETTINGS", "GPUSessionSpawner", "InvalidUserOptions", "SpawnRefused"]


class SpawnRefused(SpawnException):
    """A refusal (`SpawnException`) whose spawn-page text is its message alone.

    JupyterHub's progress stream shows a failed spawn as `Spawn failed: {jupyterhub_message}`,
    falling back to `str(exc)`, which for a SpawnException is `400 SpawnException(reason=...): ...`."""

    @property
    def jupyterhub_message(self) -> str:
        return str(self.message)


class InvalidUserOptions(SpawnRefused, ValueError):
    """Refused options: a `SpawnException` (a 400 whose spawn-page text is the message alone,
    not a hub failure) that is also the `ValueError` KubeSpawner's `load_user_options` raises,
    so code written against KubeSpawner that catches `ValueError` still does."""

    def __init__(self, message: str) -> None:
        SpawnRefused.__init__(self, message, reason="invalid-options")  # type: ignore[call-arg]


class GPUSessionSpawner(GPUSessionSettings, NotebookParking):
    """KubeSpawner whose GPU profiles keep their GPU across notebook restarts.

    Its settings (`c.GPUSessionSpawner.<name>`, or a profile's `kubespawner_override`) are
    `GPUSessionSettings`'s; here are JupyterHub's and KubeSpawner's hooks."""

    start_timeout: int  # JupyterHub's trait, typed for mypy (start raises it for a GPU profile)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._gpu_messages: list[str] = []
        self._gpu_phase_done = asyncio.Event()
        self._gpu_news = asyncio.Event()  # set at each new message, start, and the phase's end
        self._gpu_alloc: Allocation | None = None
        self._gpu_state: dict[str, str] = {}
        self._kai_queue: str | None = None
        self._profile_applied = False  # load_user_options applied the profile in this process
        self._gpu_started = False  # start() ran and stop() has not run since
        self._creating_pod = False  # inside KubeSpawner's notebook pod create (see stop)
        # The kernel host's start, awaited beside the notebook pod's (see start).
        self._kernel_host: asyncio.Future[str | None] | None = None
        # start_timeout as configured, and as start() last raised it (see start).
        self._base_start_timeout: int = int(self.start_timeout)
        self._raised_start_timeout: int = self._base_start_timeout

    def _allocation_wait(self) -> float:
        """Seconds the chosen profile may wait for a GPU (`spawnersettings.allocation_wait`),
        read before `load_user_options` (JupyterHub takes `start_timeout` when `start` returns)."""
        if callable(self.profile_list):
            return allocation_wait(self, [], None, None)
        listed = [p for p in self._sorted_dict_values(self.profile_list) if isinstance(p, dict)]
        try:
            profiles = list(self._get_initialized_profile_list(self._sorted_dict_values(self.profile_list)))
        except Exception:  # a malformed list is refused later, in load_user_options
            profiles = None
        options = self.user_options if isinstance(self.user_options, dict) else {}
        return allocation_wait(self, listed, profiles, options.get("profile"))

    # -- the GPU request of the chosen profile ---------------------------------------
    def gpu_request(self) -> C.GPURequest:
        """The GPU request of the settings as they are now (`core.requests.request_from`)."""
        try:
            return request_from({k: getattr(self, k) for k in GPU_SETTINGS})
        except InvalidSettings as e:
            raise TraitError(str(e)) from None

    def _names(self) -> SessionNames:
        return SessionNames(
            namespace=self._gpu_state.get("namespace") or str(self.namespace),
            claim=self._gpu_state.get("claim") or self._expand_user_properties(self.claim_name_template),
            holder=self._gpu_state.get("holder") or self._expand_user_properties(self.holder_name_template),
            username=self.user.name,
            servername=self.name or "",
            profile=str((self.user_options or {}).get("profile", "")),
        )

    def _setting(self, name: str) -> Any:
        """A profile setting in `KEPT_SETTINGS` as it was at this GPU's start.

        In the process that started the server, the traits hold the profile's values; after a
        hub restart they hold the global ones until the next start, so the values saved in
        the state at the start are used."""
        saved = self._gpu_state.get("settings")
        if self._profile_applied or not saved:
            return getattr(self, name)
        try:
            values = json.loads(saved)
        except ValueError:
            return getattr(self, name)
        return values[name] if isinstance(values, dict) and name in values else getattr(self, name)

    def _holder_settings(self) -> C.HolderSettings:
        queued = self._queues().scheduling(self._queue())
        return C.HolderSettings(
            image=self._setting("holder_image"),
            resources=dict(self._setting("holder_resources")),
            node_selector=dict(self._setting("node_selector") or {}),
            tolerations=tuple(t for t in self._setting("tolerations") or () if isinstance(t, dict)),
            affinity=affinity_of(self._setting),
            image_pull_secrets=pull_secrets(self.image_pull_secrets),
            scheduler_name=(queued.scheduler_name if queued else self.scheduler_name) or None,
            priority_class=(queued.priority_class if queued else self.priority_class_name) or None,
            image_pull_policy=self.image_pull_policy or None,
            agent_token_secret=self.agent_token_secret or None,
            agent_interval=self.agent_interval,
        )

    def _kernel_settings(self) -> K.KernelSettings:
        return kernelsettings.of(self)

    # -- the scheduler's queue (core/queues.py: QueuePolicy) --------------------------------
    def _queues(self) -> QueuePolicy:
        """The queue policy of the settings as they are now (a profile may override them)."""
        return QueuePolicy.of(self)

    def _queue(self) -> str | None:
        """This server's queue: resolved at this start, or saved at the last one (hub restart)."""
        return self._kai_queue or self._gpu_state.get("queue") or None

    def _queue_labels(self) -> dict[str, str]:
        return self._queues().labels(self._queue())

    async def _resolve_queue(self) -> str | None:
        """The user's queue, or None when queues are not used; refuses a user without one."""
        try:
            groups = [g.name for g in getattr(self.user, "groups", []) or []]
        except TypeError:  # a user without a list of groups (KubeSpawner's tests' MockUser)
            groups = []
        try:
            return await self._queues().queue_of(self, groups)
        except Refused as e:
            raise SpawnRefused(e.message, reason=e.reason) from None

    def _session(self, request: C.GPURequest | None = None) -> GPUSession:
        wants = request is not None and request.wants_gpu
        n = self._names()
        admission = (
            Admission.of(self, self._queues(), self._kai_queue, (n.namespace, n.claim)) if wants else None
        )
        return GPUSession(
            SessionAPI.of(self),
            n,
            request or C.GPURequest(),
            self._holder_settings(),
            emit=self._emit,
            log=self.log,
            extra_labels=self._queue_labels(),
            kernels=self._kernel_settings() if wants and self.persist_kernels else None,
            admission=admission,
            # The hub's shared watches: a cold start creates without reading first and waits
            # for changes rather than polling.
            claim_changed=watch.claim_changed,
            holder_changed=watch.holder_changed,
            claim_seen=watch.claim_seen,
            class_seen=watch.class_seen,
            cached=watch.cached,
            # A kept claim on a device the driver tainted (a broken GPU) is not re-attached.
            broken=health.claim_broken,
        )

    def _emit(self, message: str) -> None:
        """A progress message for the spawn page (and the hub log)."""
        self._gpu_messages.append(message)
        self._gpu_news.set()
        self.log.info("%s: %s", self._log_name, message)

    # -- options ------------------------------------------------------------------------
    async def _profile_list_for_user(self) -> list[dict[str, Any]]:
        profile_list = self._sorted_dict_values(self.profile_list)
        if callable(profile_list):
            profile_list = await maybe_future(profile_list(self))
        return list(self._get_initialized_profile_list(profile_list))

    async def load_user_options(self) -> None:
        """Validate options strictly, apply the profile (KubeSpawner), then check the GPU settings."""
        try:
            options: dict[str, Any] = getattr(self, "user_options", {})
            profile_list = await self._profile_list_for_user()
            self.user_options = validate_options(options, profile_list)
        except InvalidOptions as e:
            raise InvalidUserOptions(str(e)) from None
        if profile_list and not self.user_options.get("profile"):
            # A start without options gets the default profile: name it, so the claim, the
            # session file and the admin page say which size this is.
            default_slug = self._get_profile(None, profile_list)["slug"]
            self.user_options = {**self.user_options, "profile": default_slug}
        try:
            await super().load_user_options()
            self._profile_applied = True
            self.gpu_request()
        except (TraitError, ValueError) as e:
            raise InvalidUserOptions(f"This profile's settings are invalid: {e}") from None

    def _options_from_form(self, formdata: dict[str, list[str]]) -> dict[str, Any]:
        """KubeSpawner's form reading (synchronous, returns the options, validates nothing),
        except that an empty optional field (e.g. "other image") is no choice at all."""
        formdata = {k: [v for v in vs if v != ""] for k, vs in formdata.items()}
        return dict(super()._options_from_form({k: vs for k, vs in formdata.items() if vs}))

    async def run_options_from_form(self, form_data: dict[str, list[str]]) -> dict[str, Any]:
        """Read a submitted form (`options_from_form`), then validate it at once: a bad form gets
        a 400 and the form again, and nothing starts.

        JupyterHub's spawn page awaits this (and only the page calls it); `options_from_form`
        itself stays KubeSpawner's synchronous function, and `load_user_options` validates
        options from every source again, the REST API's included."""
        options = await maybe_future(super().run_options_from_form(form_data))
        try:
            return validate_options(options, await self._profile_list_for_user())
        except InvalidOptions as e:
            raise InvalidUserOptions(str(e)) from None

    # -- hardened defaults: notebook pods meet the Pod Security "restricted" level ----------
    @default("container_security_context")
    def _gpusessions_container_security_context(self) -> dict[str, Any]:
        """Non-root, no privilege escalation, no capabilities, the runtime's seccomp profile.

        Set `container_security_context` to change it (an image that must start as root, for
        example docker-stacks' `GRANT_SUDO`)."""
        return {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        }

    @default("automount_service_account_token")
    def _gpusessions_automount(self) -> bool:
        """Notebooks get no Kubernetes API token (set True if yours need one)."""
        return False

    @default("server_token_scopes")
    def _gpusessions_server_token_scopes(self) -> list[str]:
        """The `server` role's scopes, plus reading and keeping this one server's GPU.

        The notebook's GPU notice (gpusessions.notebook) asks the hub for the culler's
        warning about this server and sends "Keep my GPU" with `$JUPYTERHUB_API_TOKEN`;
        `!server` limits both to this server, not the user's other servers.
        """
        return list(S.SERVER_TOKEN)

    @default("options_form")
    def _gpusessions_options_form(self) -> Any:
        """The picker: sizes with what is free now, rendered fresh for each view from the shared watch."""
        if not self.profile_list:
            return ""
        return self._render_picker

    async def _render_picker(self, spawner: Any) -> str:
        profile_list = await self._profile_list_for_user()
        figures = await figures_for(self, profile_list)
        return render_form(profile_list, figures, self.hub.base_url)

    # -- start ----------------------------------------------------------------------------
    def start(self) -> Any:
        """A new spawn: no GPU messages yet, and progress waits for this spawn's GPU phase
        (not the last one's, which may have ended long ago)."""
        self._gpu_messages = []
        self._gpu_phase_done.clear()
        self._gpu_started = True
        # The start timeout covers the wait for a GPU too, for a profile that asks for one
        # (a start_timeout set since the last start is the new base).
        if self.start_timeout != self._raised_start_timeout:
            self._base_start_timeout = int(self.start_timeout)
        self._raised_start_timeout = int(self._base_start_timeout + self._allocation_wait())
        self.start_timeout = self._raised_start_timeout
        self._kernel_host = None
        # The kernel host starts beside the notebook pod: the spawn is done when both are.
        self._start_future = asyncio.ensure_future(self._with_kernel_host(super().start()))
        self._gpu_news.set()
        return self._start_future

    async def _with_kernel_host(self, started: Any) -> Any:
        """KubeSpawner's start (the notebook pod running), the holder's kernel gateway (still
        starting when the pod was made), then the notebook server listening."""

        def host() -> asyncio.Future[str | None] | None:
            host, self._kernel_host = self._kernel_host, None
            return host

        try:
            url = await lifecycle.with_kernel_host(started, host)
            await lifecycle.notebook_listening(url, self.http_timeout, self.notebook_listen_interval)
            return url
        except Refused as e:
            raise SpawnRefused(e.message, reason=e.reason) from None

    async def get_pod_manifest(self) -> Any:
        """Before the notebook pod: claim, holder, allocation. Then add the claim to the pod."""
        self._kai_queue = await self._resolve_queue()
        await self._prepare_gpu()
        pod = await super().get_pod_manifest()
        # Every label KubeSpawner sets stays (Zero to JupyterHub and KubeSpawner's own Service
        # select on them); gpusessions marks its notebook pods with a label of its own.
        pod.metadata.labels = {**(pod.metadata.labels or {}), L.NOTEBOOK_COMPONENT: L.NOTEBOOK}
        queued = self._queues().scheduling(self._kai_queue)
        if queued is not None:
            NP.schedule(pod, queued)
        if self._gpu_alloc is not None:
            alloc = self._gpu_alloc
            NP.add_gpu(pod, self.session_info(alloc), alloc.gateway_url, self._parking())
            pod.metadata.labels[L.CLAIM_LABEL] = L.label_value(self._names().claim)
        return pod

    async def _prepare_gpu(self) -> None:
        """The start's GPU phase (`lifecycle.prepare`): claim, holder, allocation, or the
        release of a GPU left for a CPU profile; refusals are the spawn page's."""
        self._gpu_alloc = None
        try:
            sessions: list[GPUSession] = []

            def session(request: C.GPURequest | None) -> GPUSession:
                sessions.append(self._session(request))
                return sessions[-1]

            try:
                prepared = await lifecycle.prepare(
                    self.gpu_request(),
                    session,
                    self._gpu_state,
                    timeout=self.gpu_allocation_timeout,
                    queue=self._kai_queue,
                    kept_settings={k: getattr(self, k) for k in KEPT_SETTINGS},
                    view=watch.cluster_view,
                    emit=self._emit,
                    log=self.log,
                    who=self.user.name,
                )
            except Refused as e:
                raise SpawnRefused(e.message, reason=e.reason) from None
            self._gpu_alloc, self._gpu_state = prepared.alloc, prepared.state
            if prepared.alloc is not None and prepared.alloc.kernel_host_starting:
                # The notebook pod is made now, with the gateway's address; the spawn waits
                # for the gateway (start's `_with_kernel_host`) while the pod starts.
                self._kernel_host = asyncio.ensure_future(sessions[-1].kernel_host_ready())
        finally:
            self._gpu_phase_done.set()
            self._gpu_news.set()

    def session_info(self, alloc: Allocation) -> dict[str, Any]:
        n = self._names()
        return NP.session_info(
            n.claim,
            n.namespace,
            n.holder,
            n.profile,
            self._gpu_state.get("describe", ""),
            alloc.node,
            alloc.devices,
        )

    async def poll(self) -> int | None:
        """KubeSpawner's poll, and a check that a running server's GPU holder is still there;
        a server found stopped because KAI took its GPU back is told so and released
        (`reconcile.Reconcile`)."""
        status = await super().poll()
        if getattr(self, "_stop_pending", False):
            # The hub polls before it stops a server; a cull releases the GPU meanwhile, and a
            # holder going away then is that release, not a loss to heal or a reclaim.
            return status
        if status is None and self._gpu_state.get("claim"):
            try:
                return await self._reconcile(running=True).running()
            except KubeError as e:
                self.log.warning("%s: could not check the GPU holder: %s", self._log_name, e.message)
        elif status is not None and self._gpu_state.get("claim"):
            try:
                await self._reconcile(running=False).stopped()
            except KubeError as e:
                self.log.warning("%s: could not check for a reclaim: %s", self._log_name, e.message)
        return status

    def _reconcile(self, running: bool) -> Reconcile:
        """The poll's work on this server's session, from its saved state and settings."""
        n = self._names()
        api = SessionAPI.of(self)
        kernels = self._gpu_state.get("kernels") == "1"
        user, server = self.user.name, self.name or ""

        def session() -> GPUSession:
            return GPUSession(
                api,
                n,
                C.GPURequest(),
                self._holder_settings(),
                emit=self._emit,
                log=self.log,
                extra_labels=self._queue_labels(),
                kernels=self._kernel_settings() if kernels else None,
            )

        since = float(self._gpu_state.get("since") or 0)
        return Reconcile(
            api=api,
            names=n,
            notebook_pod=self.pod_name,
            policy=self._queues(),
            session=session,
            release=self.release_gpu,
            notify=lambda text: notices.post(user, server, text),
            notify_once=lambda text: notices.post_once(user, server, text, since),
            queue=self._gpu_state.get("queue", ""),
            since=since,
            kernels=kernels,
            parks=kernels and self._gpu_state.get("park") == "1",
            on_holder_loss=self._setting("on_holder_loss"),
            evict_event_wait=self.kai_evict_event_wait,
            # The shared watch answers "the holder is fine" without an API call.
            holders=watch.holder_watch(n.namespace) if running else None,
            log=self.log,
            log_name=self._log_name,
        )

    async def progress(self) -> AsyncIterator[dict[str, Any]]:
        """GPU steps in words first (claim changes, not only pod events), then KubeSpawner's pod events."""
        sent = 0
        while True:
            self._gpu_news.clear()
            start = self._start_future
            # JupyterHub marks a spawn pending a few steps before it calls start(): a reader that
            # comes that early waits for start(), not taking the last spawn's end for this one's.
            if self._gpu_started or not self._spawn_pending:
                while sent < len(self._gpu_messages):
                    yield {"progress": min(10 + 5 * sent, 40), "message": self._gpu_messages[sent]}
                    sent += 1
                if self._gpu_phase_done.is_set() or (start is not None and start.done()):
                    break
            # Woken by the next message, start() or the phase's end (or the start's own end);
            # the bound only re-reads JupyterHub's pending flag, which signals nothing.
            news = asyncio.ensure_future(self._gpu_news.wait())
            waits: set[asyncio.Future[Any]] = {news}
            if start is not None:
                waits.add(start)
            try:
                await asyncio.wait(waits, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
            finally:
                news.cancel()
        for m in self._gpu_messages[sent:]:
            yield {"progress": 40, "message": m}
        async for event in super().progress():
            yield event

    # -- stop, release, delete --------------------------------------------------------------
    async def _make_create_pod_request(self, pod: Any, request_timeout: float) -> Any:
        self._creating_pod = True
        try:
            return await super()._make_create_pod_request(pod, request_timeout)
        finally:
            self._creating_pod = False

    async def stop(self, now: bool = False) -> None:
        if self._creating_pod:
            # KubeSpawner's start stops a notebook pod it finds in the way of its create (a
            # 409) and tries again: not the user stopping, so the GPU and progress stay.
            await super().stop(now=now)
            return
        self._gpu_started = False
        if self._kernel_host is not None:
            self._kernel_host.cancel()
        await super().stop(now=now)
        if self._gpu_state and not self._setting("keep_gpu_on_stop"):
            await self.release_gpu()

    async def release_gpu(self, park: bool = True) -> bool:
        """Delete the holder and the claim (the GPU goes back to the pool). True if one existed.
        `park` False: the holder goes at once, its kernels not parked (a deleted server's)."""
        had = await self._session().release(wait=False, park=park)
        self._gpu_state = {}
        return had

    async def delete_forever(self) -> None:
        # A kept GPU's holder goes at once (nothing is parked for a deleted server), then the
        # server's parks in the home (`parkcleanup`), then KubeSpawner's part: it deletes the
        # user's PVC (also when none exists); if that fails (a hub Role without
        # persistentvolumeclaims delete, say) the GPU and the parks must still go.
        try:
            await self.release_gpu(park=False)
            await parkcleanup.delete_parks(self)
        finally:
            try:
                await super().delete_forever()
            finally:
                if not self.name and self.user is not None:  # the default server goes only with
                    # the user: so do the user's notebook jobs
                    await lifecycle.delete_user_jobs(self.config, self.namespace, self.user.name, self.log)

    # -- state -------------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        if self._gpu_state:
            state["gpusessions"] = dict(self._gpu_state)
        return dict(state)

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        gpu = state.get("gpusessions")
        if isinstance(gpu, dict):
            self._gpu_state = {str(k): str(v) for k, v in gpu.items()}

    def clear_state(self) -> None:
        super().clear_state()
        # The kept GPU outlives the stop: its names stay in the state.
        if not self._setting("keep_gpu_on_stop"):
            self._gpu_state = {}
