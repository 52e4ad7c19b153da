"""JupyterHub configuration of `make demo` (loaded by the generated config).

The demo runs against the local simulated GPU cluster. DEMO ONLY: every demo
user logs in with one shared password printed by `make demo` (also in
.cache/demo/hub.json). Never use this authenticator setup on a real hub.
"""

import os

from gpusessions.hub import hubsetup

c = get_config()  # type: ignore[name-defined]  # noqa: F821

c.JupyterHub.spawner_class = "gpusessions"
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = os.environ["GPUSESSIONS_DEMO_PASSWORD"]
c.Authenticator.allowed_users = {"alice", "bob", "carol", "dave"}
# Two teams, each a KAI queue (made by `make demo`, localcluster/demo.py): the hub group
# picks the queue of a user's sessions.
c.JupyterHub.load_groups = {
    "team-a": {"users": ["alice", "bob"]},
    "team-b": {"users": ["carol", "dave"]},
}
c.Authenticator.admin_users = {"admin"}
c.JupyterHub.allow_named_servers = True
c.JupyterHub.template_vars = {
    "announcement_login": "Demo only: log in with the password that make demo printed."
}

c.KubeSpawner.namespace = os.environ.get("GPUSESSIONS_DEMO_NAMESPACE", "gpusessions-demo")
c.KubeSpawner.image = "quay.io/jupyterhub/singleuser:5"
c.KubeSpawner.default_url = "/lab"
c.KubeSpawner.start_timeout = 120
c.KubeSpawner.http_timeout = 60
c.GPUSessionSpawner.gpu_allocation_timeout = 120

# The same settings document the Helm chart renders (helm/gpusessions), here with the
# NVIDIA driver's own DeviceClasses plus a structured match per size, and the culler
# run by the hub (the chart runs it as a Deployment). hub_config/chart_config.py is the
# chart's side of this.
SETTINGS = {
    "sizes": [
        {
            "name": "mig-1g-10gb",
            "displayName": "MIG 1g.10gb",
            "description": "A 1/7 slice of an H100 or A100: 10 GB of GPU memory.",
            "deviceClass": "mig.nvidia.com",
            "match": {"attributes": {"profile": "1g.10gb"}},
        },
        {
            "name": "mig-3g-40gb",
            "displayName": "MIG 3g.40gb",
            "description": "A 3/7 slice: 40 GB of GPU memory.",
            "deviceClass": "mig.nvidia.com",
            "match": {"attributes": {"profile": "3g.40gb"}},
        },
        {
            "name": "gpu",
            "displayName": "Whole GPU",
            "description": "A whole H100 or A100 80GB.",
            "deviceClass": "gpu.nvidia.com",
        },
        {
            "name": "gpu-spare",
            "displayName": "Whole GPU, borrowed",
            "description": "A whole GPU beyond your team's share: another team may take it back.",
            "deviceClass": "gpu.nvidia.com",
            "priorityClass": "build-preemptible",
        },
    ],
    # Notebooks are scheduled by KAI Scheduler in their team's queue; non-preemptible
    # (`build`) except the borrowed size. gpuEquivalents: the team's MIG-aware share (1g.10gb
    # counts 1/7), which KAI's own GPU quota cannot express (docs/queues.md).
    "kai": {
        "enabled": True,
        "priorityClass": "build",
        "queues": {
            "team-a": {"groups": ["team-a"], "gpuEquivalents": 3},
            "team-b": {"groups": ["team-b"], "gpuEquivalents": 3},
        },
    },
    "cpuProfile": {"enabled": True, "displayName": "CPU only", "description": "A notebook without a GPU."},
    # The idle-GPU culler and its admin page at /services/gpusessions/ (admins only).
    "culler": {
        "enabled": True,
        "admins": ["admin"],
        "args": [
            "--interval",
            "15",
            "--idle-limit",
            "3600",
            "--stopped-keep",
            "1800",
            "--warn-before",
            "600",
            "--jobs",  # list notebook jobs on the admin JSON and /metrics
        ],
    },
    # Notebook jobs: "Create Notebook Job" in JupyterLab runs a notebook in the team's queue
    # (docs/jobs.md).
    "jobs": {"enabled": True, "schedules": {"enabled": True}},
}
hubsetup.apply(c, SETTINGS)
