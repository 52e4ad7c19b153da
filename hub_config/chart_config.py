"""gpusessions in a Zero to JupyterHub hub (the hub image copies this file to
/usr/local/etc/jupyterhub/jupyterhub_config.d/, which z2jh loads after its own config).

Everything comes from the gpusessions chart's settings (ConfigMap
gpusessions-hub-settings, mounted by helm/z2jh-values.yaml at
/usr/local/etc/gpusessions/settings.json; GPUSESSIONS_SETTINGS overrides the path).
The demo (demo_config.py) goes through the same gpusessions.hubsetup.apply().
"""

import os

from gpusessions import hubsetup

c = get_config()  # type: ignore[name-defined]  # noqa: F821

settings = hubsetup.load(os.environ.get("GPUSESSIONS_SETTINGS", "/usr/local/etc/gpusessions/settings.json"))
hubsetup.apply(c, settings)
