"""The gpusessions spawner.

`GPUSessionSpawner` (JupyterHub spawner `gpusessions`) is a KubeSpawner whose
GPU profiles get a long-lived DRA ResourceClaim held by a small holder pod, so
the same GPU (and node) comes back after a stop, a crash or a restart. A
profile without a GPU spawns exactly as with KubeSpawner.

This module holds the settings and the JupyterHub hooks only; the claim and
holder lifecycle is in `session.py`, the claim and holder in `core/claims.py`, the
notebook pod's GPU parts in `core/notebook_pod.py`, the GPU request of a profile in
`core/requests.py`, the scheduler's queues in `core/queues.py` (`QueuePolicy`) and
option validation in `core/options.py`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from jupyterhub.spawner import SpawnException
from jupyterhub.utils import maybe_future
from kubespawner import KubeSpawner
from traitlets import (
    Bool,
    Callable,
    Dict,
    Float,
    Integer,
    List,
    TraitError,
    Unicode,
    Union,
    default,
    validate,
)

from gpusessions.core import claims as C
from gpusessions.core import kernels as K
from gpusessions.core import labels as L
from gpusessions.core import notebook_pod as NP
from gpusessions.core import queues as Q
from gpusessions.core import scopes as S
from gpusessions.core.availability import size_figures, size_problems
from gpusessions.core.options import InvalidOptions
from gpusessions.core.options import validate as validate_options
from gpusessions.core.placement import AFFINITY_SETTINGS, affinity_of, pull_secrets
from gpusessions.core.queues import QueuePolicy
from gpusessions.core.requests import GPU_SETTINGS, InvalidSettings, request_from
from gpusessions.hub import notices
from gpusessions.hub.admission import Admission
from gpusessions.hub.jobcleanup import delete_user_jobs
from gpusessions.hub.jobsettings import NotebookJobDefinitions, NotebookJobs
from gpusessions.hub.picker import figures_for, render_form
from gpusessions.hub.session import Allocation, GPUSession, Refused, SessionNames
from gpusessions.kube.api import KubeError, SessionAPI
from gpusessions.kube.watch import cluster_view, holder_watch

# Profile settings that stop and the holder check need after a hub restart, when the profile's
# kubespawner_override has not been applied again (KubeSpawner applies it only at a start).
KEPT_SETTINGS = (
    "keep_gpu_on_stop",
    "on_holder_loss",
    "holder_image",
    "holder_resources",
    "node_selector",
    "tolerations",
    *(name for name, _, _ in AFFINITY_SETTINGS),
)


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


class GPUSessionSpawner(KubeSpawner):
    """KubeSpawner whose GPU profiles keep their GPU across notebook restarts."""

    start_timeout: int  # JupyterHub's trait, typed for mypy (start raises it for a GPU profile)

    gpu_device_class = Unicode(
        "",
        config=True,
        help="""DeviceClass of the GPU this server gets, for example `mig.nvidia.com` or
        `gpu.nvidia.com`. Empty (the default) means no GPU: the server spawns as with KubeSpawner.
        Usually set per profile in `kubespawner_override`.""",
    )
    gpu_count = Integer(
        1,
        config=True,
        help="How many devices of `gpu_device_class` the claim asks for (1 to `gpu_count_max`).",
    )
    gpu_count_max = Integer(
        8,
        config=True,
        help="The largest `gpu_count` (or firstAvailable count) accepted; larger values are refused.",
    )
    gpu_selectors = List(
        Unicode(),
        config=True,
        help="""CEL expressions a device must satisfy, for example
        `device.attributes['gpu.nvidia.com'].profile == '1g.10gb'` or
        `device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40000Mi')) >= 0` (a "40gb"
        MIG device has 40448 MiB on H100, 40192 MiB on A100: less than 40Gi).""",
    )
    gpu_size = Dict(
        {},
        config=True,
        help="""A structured size, instead of (or with) CEL selectors: `{"attributes": {"profile":
        "1g.10gb"}, "capacity": {"memory": "10Gi"}, "versions": {"driverVersion": "580.0.0"}}` means
        attributes equal to these values, capacities at least these quantities and version
        attributes at least these semantic versions. It becomes a CEL selector for the scheduler and the
        same test in Python for the picker, so the two agree.""",
    )
    gpu_first_available = List(
        Dict(),
        config=True,
        help="""Prioritized alternatives (DRA `firstAvailable`), used instead of `gpu_device_class`:
        a list of `{"device_class": ..., "count": 1, "selectors": [...]}`; the first that can be
        allocated wins.""",
    )
    keep_gpu_on_stop = Bool(
        True,
        config=True,
        help="""Keep the claim and holder (and so the GPU) when the server stops, so that the next
        start gets the same device back. False releases the GPU at every stop.""",
    )
    claim_name_template = Unicode(
        "gpu-{user_server}",
        config=True,
        help="Name of the server's ResourceClaim; KubeSpawner's name expansions apply.",
    )
    holder_name_template = Unicode(
        "gpu-holder-{user_server}",
        config=True,
        help="Name of the server's holder pod; KubeSpawner's name expansions apply.",
    )
    holder_image = Unicode(
        "gpusessions-holder:0.1.0",
        config=True,
        help="Image of the holder pod (runs the GPU agent). Set it to your registry's copy.",
    )
    agent_token_secret = Unicode(
        "",
        config=True,
        help="""Name of a Secret in the user namespace whose key `token` the holder's GPU agent
        requires on its API (`Authorization: Bearer <token>`); give the culler the same token
        (`configure_culler(..., agent_token=...)`). Empty: the agent's API is open to anyone who
        can reach the holder pod (its NetworkPolicy aside).""",
    )
    agent_interval = Float(
        0.0,
        config=True,
        help="""Seconds between the holder's GPU agent's NVML samples (its
        `GPUSESSIONS_AGENT_INTERVAL`); 0 leaves the agent's default, 2 s. The culler sees GPU
        work that began less than one sample ago as idle; a shorter interval costs the agent
        a little CPU per holder.""",
    )
    holder_resources = Dict(
        {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
        config=True,
        help="`resources` of the holder container (requests and limits).",
    )
    gpu_keep_extension = Float(
        4 * 3600,
        config=True,
        help="""Seconds a user's "Keep my GPU" (answering the culler's warning) holds off culling.""",
    )
    persist_kernels = Bool(
        True,
        config=True,
        help="""Host the user's kernels in the holder pod (a Jupyter Kernel Gateway beside the
        GPU), so kernels, their variables and the models they hold in GPU memory survive
        notebook restarts. Only for GPU profiles; the notebook image needs
        `jupyter_kernel_gateway` and this package. Kernels end when the GPU is released.""",
    )
    kernel_image = Unicode(
        "",
        config=True,
        help="Image of the holder's kernel gateway container; empty means the notebook image.",
    )
    kernel_gateway_command = List(
        Unicode(),
        ["jupyter", "kernelgateway"],
        config=True,
        help="Command that starts the kernel gateway in `kernel_image` (configured by KG_* variables).",
    )
    kernel_port = Integer(
        K.KERNEL_PORT,
        config=True,
        help="Port of the kernel gateway in the holder pod.",
    )
    kernel_network_policy = Bool(
        True,
        config=True,
        help="""Create a NetworkPolicy per session that admits the kernel gateway's port only from
        that session's notebook pod (owned by the claim; needs `create, get, delete` on
        `networkpolicies` in the user namespace). Off if your cluster manages policies itself.""",
    )
    kernel_resources = Dict(
        {},
        config=True,
        help="""`resources` of the kernel gateway container (the kernels' CPU and memory live
        there, not in the notebook pod); empty means none set.""",
    )
    kai_queue = Union(
        [Unicode(), Dict(), Callable()],
        default_value="",
        config=True,
        help="""The KAI Scheduler queue of a user's sessions: a queue name; a mapping from hub
        group to queue (`{"team-a": "team-a", "*": "shared"}`, the user's first group found,
        `"*"` for everyone else); or a callable `(spawner) -> str | None` (may be async).
        Empty (the default): KAI is not used. With a queue, the notebook pod, the holder pod and
        the claim carry `kai.scheduler/queue`, and both pods use `kai_scheduler_name` and
        `kai_priority_class`. A user with no queue is refused with a clear message (or gets
        `kai_default_queue`), never KAI's silent `default-queue`.""",
    )
    kai_default_queue = Unicode(
        "",
        config=True,
        help="Queue for users `kai_queue` gives none; empty means such users are refused.",
    )
    kai_priority_class = Unicode(
        Q.PRIORITY_CLASS,
        config=True,
        help="""PriorityClass of notebook and holder pods under KAI: `build` (100, the default) is
        non-preemptible: it runs only within the queue's quota and is never evicted. Use
        `build-preemptible` (75) or `train` (50) in a profile that may go over quota and be
        reclaimed.""",
    )
    kai_evict_event_wait = Float(
        5.0,
        help="""Seconds to wait, when a session's holder pod is gone, for KAI's `Evict` event that
        tells a reclaim (or preemption) from another loss. A reclaimed session is told so and
        released instead of having its holder recreated.""",
    ).tag(config=True)

    kai_scheduler_name = Unicode(
        Q.SCHEDULER_NAME,
        config=True,
        help="schedulerName of notebook and holder pods when `kai_queue` is set.",
    )
    kai_gpu_quota = Dict(
        {},
        config=True,
        help="""Per-queue GPU quota in GPU-equivalents, enforced by the spawner before it creates
        a claim (`{"team-a": 2}`): a MIG slice Ng.* counts N/7, a whole GPU 1, summed over the
        queue's claims the hub sees. KAI itself charges any claim as a whole GPU; see
        docs/queues.md. Queues not listed have no such limit.""",
    )
    on_holder_loss = Unicode(
        "recreate",
        config=True,
        help="""What to do when a running server's holder pod is lost (deleted, evicted, failed):
        `recreate` makes a new holder for the same claim, so the GPU stays the user's (the
        notebook pod keeps it meanwhile; kernels hosted in the old holder are lost), or
        `release` stops the server and releases the GPU. The user is told either way.""",
    )
    gpu_allocation_timeout = Float(
        300,
        config=True,
        help="""Seconds to wait for a free GPU of the chosen size. Then the request is withdrawn
        and the user told what was waited for; this does not count as a hub failure.""",
    )

    @validate("gpu_count")
    def _check_count(self, proposal: Any) -> int:
        value = proposal["value"]
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= self.gpu_count_max:
            raise TraitError(
                f"gpu_count must be a whole number from 1 to {self.gpu_count_max}, not {value!r}"
            )
        return int(value)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._gpu_messages: list[str] = []
        self._gpu_phase_done = asyncio.Event()
        self._gpu_alloc: Allocation | None = None
        self._gpu_state: dict[str, str] = {}
        self._kai_queue: str | None = None
        self._profile_applied = False  # load_user_options applied the profile in this process
        self._gpu_started = False  # start() ran and stop() has not run since
        self._creating_pod = False  # inside KubeSpawner's notebook pod create (see stop)
        # start_timeout as configured, and as start() last raised it (see start).
        self._base_start_timeout: int = int(self.start_timeout)
        self._raised_start_timeout: int = self._base_start_timeout

    @staticmethod
    def _overrides(profile: dict[str, Any]) -> list[dict[str, Any]]:
        """The profile's kubespawner_override and those of its options' choices."""
        found = [profile.get("kubespawner_override") or {}]
        for option in (profile.get("profile_options") or {}).values():
            if not isinstance(option, dict):
                continue
            choices = option.get("choices") or {}
            for choice in [*choices.values(), option.get("unlisted_choice") or {}]:
                if isinstance(choice, dict):
                    found.append(choice.get("kubespawner_override") or {})
        return [o for o in found if isinstance(o, dict)]

    def _allocation_wait(self) -> float:
        """Seconds the chosen profile may wait for a GPU: its `gpu_allocation_timeout`, or 0 when it
        asks for no GPU. Read before `load_user_options` (JupyterHub takes `start_timeout` when
        `start` returns): when the profile cannot be known yet (a callable `profile_list`, an
        unknown slug) the largest wait any profile may have."""

        def timeout(override: dict[str, Any]) -> float:
            v = override.get("gpu_allocation_timeout", self.gpu_allocation_timeout)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0

        def wants(override: dict[str, Any]) -> bool:
            return bool(
                override.get("gpu_device_class", self.gpu_device_class)
                or override.get("gpu_first_available", self.gpu_first_available)
            )

        largest = max([float(self.gpu_allocation_timeout)] + [timeout(o) for o in self._all_overrides()])
        if callable(self.profile_list):
            return largest
        try:
            profiles = list(self._get_initialized_profile_list(self._sorted_dict_values(self.profile_list)))
        except Exception:  # a malformed list is refused later, in load_user_options
            return largest
        if not profiles:  # no profiles: the spawner's own settings
            return float(self.gpu_allocation_timeout) if wants({}) else 0.0
        options = self.user_options if isinstance(self.user_options, dict) else {}
        slug = options.get("profile")
        chosen = [p for p in profiles if (p.get("slug") == slug if slug else p.get("default"))]
        if not chosen:  # an unknown profile is refused later
            return largest
        return max((timeout(o) for o in self._overrides(chosen[0]) if wants(o)), default=0.0)

    def _all_overrides(self) -> list[dict[str, Any]]:
        if callable(self.profile_list):
            return []
        profiles = self._sorted_dict_values(self.profile_list)
        return [o for p in profiles if isinstance(p, dict) for o in self._overrides(p)]

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
        def dicts(items: Any) -> tuple[dict[str, Any], ...]:
            return tuple(x for x in (self._expand_all(list(items or [])) or []) if isinstance(x, dict))

        static_env = {k: v for k, v in (self.environment or {}).items() if isinstance(v, str)}
        return K.KernelSettings(
            image=self.kernel_image or self.image,
            secret=K.secret_name(self._names().holder),
            port=self.kernel_port,
            command=tuple(self.kernel_gateway_command),
            uid=self.uid if isinstance(self.uid, int) else 1000,
            gid=self.gid if isinstance(self.gid, int) else 100,
            working_dir=self.working_dir or None,
            resources=dict(self.kernel_resources),
            env=tuple((k, self._expand_user_properties(v)) for k, v in sorted(static_env.items())),
            volumes=dicts(self.volumes),
            volume_mounts=dicts(self.volume_mounts),
            image_pull_policy=self.image_pull_policy or None,
            network_policy=self.kernel_network_policy,
            agent_port=C.AGENT_PORT,
        )

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
            Admission(self._queues(), self._kai_queue, (n.namespace, n.claim), self.log, self._log_name)
            if wants and self._kai_queue
            else None
        )
        return GPUSession(
            SessionAPI(timeout=self.k8s_api_request_timeout),
            n,
            request or C.GPURequest(),
            self._holder_settings(),
            emit=self._emit,
            log=self.log,
            extra_labels=self._queue_labels(),
            kernels=self._kernel_settings() if wants and self.persist_kernels else None,
            admission=admission,
            claim_changed=self._claim_changed,
        )

    async def _claim_changed(self, namespace: str, name: str, seen: str | None, timeout: float) -> None:
        """Wait until the shared claim watch sees `namespace/name` change (at most `timeout`)."""
        claims = cluster_view().claims
        if claims.ready.is_set() and not claims.error:
            await claims.wait_change(f"{namespace}/{name}", seen, timeout)
        else:
            await asyncio.sleep(timeout)

    def _emit(self, message: str) -> None:
        """A progress message for the spawn page (and the hub log)."""
        self._gpu_messages.append(message)
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
        return super().start()

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
            NP.add_gpu(pod, self.session_info(self._gpu_alloc), self._gpu_alloc.gateway_url)
            pod.metadata.labels[L.CLAIM_LABEL] = L.label_value(self._names().claim)
        return pod

    async def _prepare_gpu(self) -> None:
        self._gpu_alloc = None
        try:
            request = self.gpu_request()
            if not request.wants_gpu:
                await self._release_previous_gpu_for_cpu_profile()
                return
            await self._refuse_if_size_missing(request)
            session = self._session(request)
            try:
                self._gpu_alloc = await session.ensure(self.gpu_allocation_timeout)
            except Refused as e:
                raise SpawnRefused(e.message, reason=e.reason) from None
            except KubeError as e:
                raise SpawnRefused(
                    f"The cluster refused the GPU request: {e.message}", reason="gpu-api-error"
                ) from None
            n = session.n
            self._gpu_state = {
                "namespace": n.namespace,
                "claim": n.claim,
                "holder": n.holder,
                "request_hash": request.hash(),
                "profile": n.profile,
                "describe": request.describe(),
                "kernels": "1" if session.kernels is not None else "",
                "queue": self._kai_queue or "",
                # When this start began: older Evict events of KAI are not about this session.
                "since": f"{time.time():.0f}",
                # default=str: a toleration given as a V1Toleration rather than a dict is kept
                # as text (and ignored after a restart) instead of failing the start.
                "settings": json.dumps(
                    {k: getattr(self, k) for k in KEPT_SETTINGS}, sort_keys=True, default=str
                ),
            }
        finally:
            self._gpu_phase_done.set()

    async def _refuse_if_size_missing(self, request: C.GPURequest) -> None:
        """Refuse at once when no device of this size exists at all (not merely all in use)."""
        try:
            view = cluster_view()
            if not await view.wait_ready(timeout=5) or view.errors:
                return  # no reliable picture: let the scheduler decide
            inv, allocated, left, classes = view.derived()
        except Exception as e:  # the picture is an optimisation, never a reason to fail
            self.log.warning("No cluster view for the size check: %s", e)
            return
        missing = [dc for dc in request.device_classes() if dc not in classes]
        if missing:
            return  # GPUSession explains a missing DeviceClass
        f = size_figures(request, inv, allocated, classes, left, view.figures.by_shape)
        if f.state == "not-offered":
            raise SpawnRefused(
                f"No GPU of this size ({request.describe()}) exists on this cluster, so waiting "
                "would not help. Pick another size or ask your admin.",
                reason="gpu-size-missing",
            )
        problems = size_problems(request, inv, classes)
        if problems:
            # A claim the scheduler would fail (or could place on a GPU cut into MIG devices):
            # say why now instead of letting the user wait.
            raise SpawnRefused(
                f"This GPU size cannot be used on this cluster: {problems[0]}. Ask your admin.",
                reason="gpu-size-broken",
            )

    async def _release_previous_gpu_for_cpu_profile(self) -> None:
        """A server that switches to a CPU-only profile gives back the GPU it kept (also one
        the hub's state lost: a hub that died after creating the claim never saved it)."""
        if not self._gpu_state:
            try:
                if await self._session().release_if_ours():
                    self._emit(
                        "You picked a profile without a GPU: released a GPU left from an earlier start."
                    )
            except KubeError as e:  # best effort: the culler releases orphans anyway
                self.log.warning(
                    "Could not look for a GPU left by an earlier start of %s: %s", self.user.name, e
                )
            return
        self._emit("You picked a profile without a GPU: releasing the GPU you had ...")
        await self._session().release(wait=False)
        self._gpu_state = {}

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

    @validate("on_holder_loss")
    def _check_on_holder_loss(self, proposal: Any) -> str:
        if proposal["value"] not in ("recreate", "release"):
            raise TraitError(f"on_holder_loss must be 'recreate' or 'release', not {proposal['value']!r}")
        return str(proposal["value"])

    async def poll(self) -> int | None:
        """KubeSpawner's poll, and a check that a running server's GPU holder is still there;
        a server found stopped because KAI took its GPU back is told so and released."""
        status = await super().poll()
        if getattr(self, "_stop_pending", False):
            # The hub polls before it stops a server; a cull releases the GPU meanwhile, and a
            # holder going away then is that release, not a loss to heal or a reclaim.
            return status
        if status is None and self._gpu_state.get("claim"):
            try:
                return await self._check_holder()
            except KubeError as e:
                self.log.warning("%s: could not check the GPU holder: %s", self._log_name, e.message)
        elif status is not None and self._gpu_state.get("queue") and self._gpu_state.get("claim"):
            try:
                await self._check_reclaimed()
            except KubeError as e:
                self.log.warning("%s: could not check for a reclaim: %s", self._log_name, e.message)
        return status

    async def _check_reclaimed(self) -> bool:
        """KAI deleted this session's pods to give the GPU to another team (an Evict event on
        their PodGroups): tell the user and release the GPU (its allocation is gone anyway).
        True if so."""
        policy = self._queues()
        n = self._names()
        api = SessionAPI(timeout=self.k8s_api_request_timeout)
        if not C.holder_lost(await api.get_pod(n.namespace, n.holder)):
            return False  # the holder runs: whatever stopped the notebook, it was not a reclaim
        since = float(self._gpu_state.get("since") or 0)
        # KAI writes the event while (or just after) it deletes the pods: give it a moment.
        deadline = time.monotonic() + self.kai_evict_event_wait
        while True:
            events = await api.events(n.namespace, policy.evict_events_selector)
            by = policy.evicted_by(events, n.namespace, (n.holder, self.pod_name), since)
            if by is not None:
                break
            if time.monotonic() >= deadline:
                self.log.info("%s: holder gone, no Evict event of KAI for it", self._log_name)
                return False
            await asyncio.sleep(0.5)
        queue = self._gpu_state.get("queue", "")
        self.log.warning("%s: KAI took the GPU back for %s; releasing it", self._log_name, by)
        notices.post(self.user.name, self.name or "", policy.reclaim_notice(queue, by))
        await self.release_gpu()
        return True

    async def _check_holder(self) -> int | None:
        n = self._names()
        # The shared watch answers the common case (the holder is fine) without an API call;
        # only a holder the watch does not show as healthy is read, to be sure.
        holders = holder_watch(n.namespace)
        seen = holders.objects.get(f"{n.namespace}/{n.holder}")
        if holders.ready.is_set() and not holders.error and not C.holder_lost(seen):
            return None
        api = SessionAPI(timeout=self.k8s_api_request_timeout)
        if not C.holder_lost(await api.get_pod(n.namespace, n.holder)):
            return None
        # Evicted by KAI (reclaim, preemption): not recreated, the GPU is another team's now.
        if self._gpu_state.get("queue") and await self._check_reclaimed():
            return 1
        kernels = self._gpu_state.get("kernels") == "1"
        session = GPUSession(
            api,
            n,
            C.GPURequest(),
            self._holder_settings(),
            emit=self._emit,
            log=self.log,
            extra_labels=self._queue_labels(),
            kernels=self._kernel_settings() if kernels else None,
        )
        user, server = self.user.name, self.name or ""
        if self._setting("on_holder_loss") == "release":
            self.log.warning(
                "%s: the GPU holder was lost; stopping and releasing, as configured", self._log_name
            )
            notices.post(
                user,
                server,
                "Your GPU's holder pod was lost (deleted or evicted), so your server was stopped and its "
                "GPU released, as this hub is configured. Start again to get a GPU.",
            )
            await self.release_gpu()
            return 1
        what = await session.heal_holder()
        if what == "recreated":
            self.log.warning("%s: the GPU holder was lost and has been recreated", self._log_name)
            text = (
                "Your GPU's holder pod was lost (deleted or evicted) and has been recreated: "
                "the GPU stays yours."
            )
            if kernels:
                text += " Kernels running beside the GPU were lost: restart them."
            notices.post(user, server, text)
        return None

    async def progress(self) -> AsyncIterator[dict[str, Any]]:
        """GPU steps in words first (claim changes, not only pod events), then KubeSpawner's pod events."""
        sent = 0
        while True:
            start = self._start_future
            # JupyterHub marks a spawn pending a few steps before it calls start(): a reader that
            # comes that early waits for start(), not taking the last spawn's end for this one's.
            if self._gpu_started or not self._spawn_pending:
                while sent < len(self._gpu_messages):
                    yield {"progress": min(10 + 5 * sent, 40), "message": self._gpu_messages[sent]}
                    sent += 1
                if self._gpu_phase_done.is_set() or (start is not None and start.done()):
                    break
            await asyncio.sleep(0.2)
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
        await super().stop(now=now)
        if self._gpu_state and not self._setting("keep_gpu_on_stop"):
            await self.release_gpu()

    async def release_gpu(self) -> bool:
        """Delete the holder and the claim (the GPU goes back to the pool). True if one existed."""
        had = await self._session().release(wait=False)
        self._gpu_state = {}
        return had

    async def delete_forever(self) -> None:
        # KubeSpawner deletes the user's PVC here (also when none exists); if that fails
        # (a hub Role without persistentvolumeclaims delete, say) the GPU must still go back.
        try:
            await super().delete_forever()
        finally:
            await self.release_gpu()
            # The default server goes only with the user: so do the user's notebook jobs.
            if not self.name and self.user is not None and NotebookJobs(config=self.config).enabled:
                definitions = NotebookJobDefinitions(config=self.config).enabled
                await delete_user_jobs(self.namespace, self.user.name, self.log, definitions)

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
