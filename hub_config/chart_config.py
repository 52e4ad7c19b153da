"""gpusessions in a Zero to JupyterHub hub. The hub image copies this file to
/usr/local/etc/jupyterhub/gpusessions_config.py and helm/z2jh-values.yaml runs it from
`hub.extraConfig`, which z2jh executes with its own config object `c` (not from
jupyterhub_config.d: a file there is loaded into a fresh config that replaces whole lists
when merged, so z2jh's `c.JupyterHub.services`, with the culler's token, would be lost).

Everything comes from the gpusessions chart's settings (ConfigMap
gpusessions-hub-settings, mounted by helm/z2jh-values.yaml at
/usr/local/etc/gpusessions/settings.json; GPUSESSIONS_SETTINGS overrides the path).
The demo (demo_config.py) goes through the same gpusessions.hub.hubsetup.apply().
"""

import os

from gpusessions.hub import hubsetup

c = get_config()  # type: ignore[name-defined]  # noqa: F821

settings = hubsetup.load(os.environ.get("GPUSESSIONS_SETTINGS", "/usr/local/etc/gpusessions/settings.json"))
hubsetup.apply(c, settings)
