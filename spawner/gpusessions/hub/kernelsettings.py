"""How a spawner's holder runs the kept kernels (`core.kernels.KernelSettings`) from its
settings: the gateway's image, command, user, resources, volumes (the notebook's: the kernels
read and write the user's files, and park to the user's home), the session's variables, and
parking at the holder's termination (`park_kernels`, `park_timeout`, `park_max_bytes`)."""

from __future__ import annotations

from typing import Any

from traitlets import TraitError

from gpusessions.core import claims as C
from gpusessions.core import kernels as K
from gpusessions.hub import usercode


def of(spawner: Any) -> K.KernelSettings:
    """The kernel settings of `spawner` (a `GPUSessionSpawner`) as they are now."""

    def dicts(items: Any) -> tuple[dict[str, Any], ...]:
        return tuple(x for x in (spawner._expand_all(list(items or [])) or []) if isinstance(x, dict))

    names = spawner._names()
    static_env = {k: v for k, v in (spawner.environment or {}).items() if isinstance(v, str)}
    gpu = spawner._gpu_state.get("describe", "")
    if not gpu:
        try:
            gpu = spawner.gpu_request().describe()
        except TraitError:
            gpu = ""
    return K.KernelSettings(
        image=spawner.kernel_image or spawner.image,
        secret=K.secret_name(names.holder),
        port=spawner.kernel_port,
        command=tuple(spawner.kernel_gateway_command),
        uid=spawner.uid if isinstance(spawner.uid, int) else 1000,
        gid=spawner.gid if isinstance(spawner.gid, int) else 100,
        working_dir=spawner.working_dir or None,
        resources=dict(spawner.kernel_resources),
        env=tuple((k, spawner._expand_user_properties(v)) for k, v in sorted(static_env.items())),
        volumes=dicts(spawner.volumes),
        volume_mounts=dicts(spawner.volume_mounts),
        image_pull_policy=spawner.image_pull_policy or None,
        network_policy=spawner.kernel_network_policy,
        agent_port=C.AGENT_PORT,
        agent_peers=tuple(dict(p) for p in spawner.agent_network_peers if isinstance(p, dict)),
        init_containers=usercode.init_containers(spawner, spawner.init_containers),
        session_env=(("GPUSESSIONS_PROFILE", names.profile), ("GPUSESSIONS_GPU", gpu)),
        park=bool(spawner.park_kernels),
        park_timeout=int(spawner.park_timeout),
        park_max_bytes=int(spawner.park_max_bytes),
    )
