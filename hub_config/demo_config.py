"""JupyterHub configuration of `make demo` (loaded by the generated config).

The demo runs against the local simulated GPU cluster. Demo users log in with
the password printed by `make demo` (also in .cache/demo/hub.json).
"""

import os

c = get_config()  # type: ignore[name-defined]  # noqa: F821

c.JupyterHub.spawner_class = "gpusessions"
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = os.environ["GPUSESSIONS_DEMO_PASSWORD"]
c.Authenticator.allowed_users = {"alice", "bob", "carol", "dave"}
c.Authenticator.admin_users = {"admin"}

c.KubeSpawner.namespace = os.environ.get("GPUSESSIONS_DEMO_NAMESPACE", "gpusessions-demo")
c.KubeSpawner.image = "quay.io/jupyterhub/singleuser:5"
c.KubeSpawner.default_url = "/lab"
c.KubeSpawner.start_timeout = 120
c.KubeSpawner.http_timeout = 60
c.KubeSpawner.profile_list = [
    {
        "display_name": "CPU only",
        "slug": "cpu",
        "description": "A notebook without a GPU.",
        "default": True,
    },
]
