"""GPUSessionSpawner's settings: the traitlets a hub config or a profile's
`kubespawner_override` sets (`c.GPUSessionSpawner.<name>`), with their help texts.

`GPUSessionSettings` is a `HasTraits` mixin of `GPUSessionSpawner` (hub/spawner.py), so the
settings are configured, documented and overridden as the spawner's own; here they only
have a module of their own, beside the spawner's hooks.
"""

from __future__ import annotations

from typing import Any

from traitlets import (
    Bool,
    Callable,
    Dict,
    Float,
    HasTraits,
    Integer,
    List,
    TraitError,
    Unicode,
    Union,
    validate,
)

from gpusessions.core import claims as C
from gpusessions.core import kernels as K
from gpusessions.core import queues as Q
from gpusessions.core.placement import AFFINITY_SETTINGS

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


def profile_overrides(profile: dict[str, Any]) -> list[dict[str, Any]]:
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


def allocation_wait(
    settings: Any, listed: list[dict[str, Any]], profiles: list[dict[str, Any]] | None, slug: str | None
) -> float:
    """Seconds the chosen profile may wait for a GPU: its `gpu_allocation_timeout`, or 0 when it
    asks for no GPU; when the profile cannot be known yet (a callable `profile_list`, a list
    not initialized: `profiles` None; an unknown slug) the largest wait any profile may have.

    `settings`: the spawner's own settings (before a profile is applied); `listed`: the
    profile list as configured; `profiles`: the same, initialized (defaults filled in)."""

    def timeout(override: dict[str, Any]) -> float:
        v = override.get("gpu_allocation_timeout", settings.gpu_allocation_timeout)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0

    def wants(override: dict[str, Any]) -> bool:
        return bool(
            override.get("gpu_device_class", settings.gpu_device_class)
            or override.get("gpu_first_available", settings.gpu_first_available)
        )

    overrides = [o for p in listed for o in profile_overrides(p)]
    largest = max([float(settings.gpu_allocation_timeout)] + [timeout(o) for o in overrides])
    if profiles is None:
        return largest
    if not profiles:  # no profiles: the spawner's own settings
        return float(settings.gpu_allocation_timeout) if wants({}) else 0.0
    chosen = [p for p in profiles if (p.get("slug") == slug if slug else p.get("default"))]
    if not chosen:  # an unknown profile is refused later
        return largest
    return max((timeout(o) for o in profile_overrides(chosen[0]) if wants(o)), default=0.0)


class GPUSessionSettings(HasTraits):
    """The settings of GPUSessionSpawner (configured as `c.GPUSessionSpawner.<name>`)."""

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
        C.AGENT_TOKEN_SECRET,
        config=True,
        help="""Name of a Secret in the user namespace whose key `token` the holder's GPU agent
        requires on its API (`Authorization: Bearer <token>`); the hub makes it, with a random
        token, the first time a holder needs it in a namespace (the Helm chart makes its own).
        The culler reads it there (`configure_culler` passes `--agent-token-secret`) or is given
        it (`configure_culler(..., agent_token=...)`, the chart). Empty: the agent's API is open
        to anyone who can reach the holder pod (its NetworkPolicy aside): do not.""",
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
        {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "96Mi"}},
        config=True,
        help="""`resources` of the holder container, the GPU agent (requests and limits). The agent
        holds about 30 MiB (resident, measured idle and under a flood of refused requests with the
        simulated NVML: tests/unit/test_agent_guard.py); the limit leaves room for the real NVML
        library. The kept kernels have their own container (`kernel_resources`).""",
    )
    gpu_keep_extension = Float(
        4 * 3600,
        min=60,
        max=7 * 86400,
        config=True,
        help="""Seconds a user's "Keep my GPU" holds off culling (default 4 hours, at most 7 days).
        A keep is accepted only while the culler's warning stands (each warning takes one keep;
        an admin may keep at any time), and while another user waits for a GPU of that size it
        holds only the culler's `keep_contended` from the warning. The JupyterLab panel and the
        hub home page say until when.""",
    )
    max_gpu_sessions_per_user = Integer(
        0,
        min=0,
        config=True,
        help="""The most GPU sessions (claims: running or kept servers with a GPU) one user may
        hold across their named servers; a start past it is refused in words and creates
        nothing (a kept GPU of the same server is reused, never refused). Default 0: no
        limit (JupyterHub's `named_server_limit_per_user` still bounds the servers).""",
    )
    persist_kernels = Bool(
        True,
        config=True,
        help="""Host the user's kernels in the holder pod (a Jupyter Kernel Gateway beside the
        GPU), so kernels, their variables and the models they hold in GPU memory survive
        notebook restarts. Only for GPU profiles; the notebook image needs
        `jupyter_kernel_gateway` and this package. Kernels end when the GPU is released.""",
    )
    park_kernels = Bool(
        True,
        config=True,
        help="""Park a GPU session's kernels instead of ending them: save each kernel's variables
        to the user's home (`~/.gpusessions/parked/<server>/`) and restore them into new kernels
        of the same kind at the next start (docs/parking.md). Kernels in the holder
        (`persist_kernels`) park when the holder pod is deleted (the Release button, the
        culler, KAI taking back a borrowed GPU, a node drain); kernels in the notebook pod
        (`persist_kernels` off, or a holder without a kernel host) park when the notebook
        server stops (the culler, the user's Stop, KAI evicting the pod). The parking pod's
        grace period becomes `park_timeout` plus 15 s, and the hub and the culler delete it with
        that grace period (KubeSpawner's `delete_grace_period` is raised to it for such a
        notebook pod). Off: the kernels end with their pod, as before.""",
    )
    park_timeout = Integer(
        120,
        min=5,
        max=3600,
        config=True,
        help="""Seconds a session's kernels have to park when their pod is deleted (all kernels
        together); the pod's terminationGracePeriodSeconds is this plus 15 s. A kernel whose park
        does not finish in time is lost as in a cull, and the user is told at the next start.""",
    )
    park_max_bytes = Integer(
        16 << 30,
        min=0,
        config=True,
        help="""The most bytes one user's parked state may hold (default 16 GiB), across all
        their parked servers and kernels: a park is given what the user's other parks leave.
        A kernel whose state is over it is not parked (its variables are lost as in a cull) and
        the user is told at the next start, in words ("the session's state is 12.3 GiB, over
        what is left of your parking limit (...)").""",
    )
    park_expiry_days = Float(
        30.0,
        min=0.0,
        config=True,
        help="""Days a parked session is kept for its next start: one older is deleted, not
        restored, at the first start after it expired, and the user is told so there (the GPU
        panel and the server's log). 0: kept until restored.""",
    )
    park_cleanup_timeout = Integer(
        120,
        min=10,
        max=3600,
        config=True,
        help="""When JupyterHub deletes a user (or a named server), the parked sessions in their
        home (`~/.gpusessions/parked`, or that server's parks) are deleted by a short-lived pod
        that runs as the notebook does (its image, volumes and security context), since the hub
        cannot read homes; this many seconds at most (the pod's activeDeadlineSeconds too). A
        cleanup that fails is logged as an error naming the folder; the deletion goes on. Not
        run where KubeSpawner deletes the home PVC itself (`storage_pvc_ensure` and
        `delete_pvc`).""",
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
        that session's notebook pod, and the GPU agent's only from that notebook and
        `agent_network_peers` (owned by the claim; needs `create, get, delete` on
        `networkpolicies` in the user namespace). Off if your cluster manages policies itself.""",
    )
    agent_network_peers = List(
        Dict(),
        [dict(p) for p in K.AGENT_READERS],
        config=True,
        help="""NetworkPolicy peers (`from` entries) admitted to a holder's GPU agent port besides
        the session's own notebook, in the per-session policy (`kernel_network_policy`): the
        culler. The default: the Helm chart's culler pods and Zero to JupyterHub's hub pod (a
        culler run by the hub, `configure_culler`, reads the agents from there); the chart's
        settings (hubsetup) leave only its culler.""",
    )
    user_code_init_containers = List(
        Unicode(),
        ["block-cloud-metadata"],
        config=True,
        help="""Names of the spawner's `init_containers` that pods running user code beside the
        notebook get too: the holder pod when it hosts kernels, and notebook jobs' pods. Zero to
        JupyterHub's `block-cloud-metadata` (its `singleuser.cloudMetadata.blockWithIptables`,
        on by default) is one: an iptables rule that keeps user code from the cloud metadata
        server. [] gives them none.""",
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

    notebook_listen_interval = Float(
        0.1,
        config=True,
        help="""Seconds between two looks (a TCP connect) for the started notebook server's port,
        before the start is reported done. JupyterHub's own check that follows then succeeds at
        its first try instead of backing off (up to 5 s between its tries). 0: no looks, only
        JupyterHub's check. A server that does not listen within `http_timeout` fails the start
        with a message that says so.""",
    )

    @validate("gpu_count")
    def _check_count(self, proposal: Any) -> int:
        value = proposal["value"]
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= self.gpu_count_max:
            raise TraitError(
                f"gpu_count must be a whole number from 1 to {self.gpu_count_max}, not {value!r}"
            )
        return int(value)

    @validate("on_holder_loss")
    def _check_on_holder_loss(self, proposal: Any) -> str:
        if proposal["value"] not in ("recreate", "release"):
            raise TraitError(f"on_holder_loss must be 'recreate' or 'release', not {proposal['value']!r}")
        return str(proposal["value"])
