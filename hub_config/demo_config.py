"""JupyterHub configuration of `make demo` (loaded by the generated config).

The demo runs against the local simulated GPU cluster. DEMO ONLY: every demo
user logs in with one shared password printed by `make demo` (also in
.cache/demo/hub.json). Never use this authenticator setup on a real hub.
"""

import os

from gpusessions.culler.hubconfig import configure_culler
from gpusessions.handlers import configure_hub
from gpusessions.profiles import default_profiles

c = get_config()  # type: ignore[name-defined]  # noqa: F821

c.JupyterHub.spawner_class = "gpusessions"
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = os.environ["GPUSESSIONS_DEMO_PASSWORD"]
c.Authenticator.allowed_users = {"alice", "bob", "carol", "dave"}
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
c.KubeSpawner.profile_list = default_profiles()
configure_hub(c)
# The idle-GPU culler and its admin page at /services/gpusessions/ (admins only).
configure_culler(
    c,
    admins=["admin"],
    args=["--interval", "15", "--idle-limit", "3600", "--stopped-keep", "1800", "--warn-before", "600"],
)
