"""The hub side's entry point as jupyterhub_config.py files have always imported it.

    from gpusessions.hub.handlers import configure_hub
    configure_hub(c)

Only names from where they live now: `configure_hub` (`configure.py`), the "Release my GPU"
handler (`release.py`), the culler's warnings and "Keep my GPU" (`keep.py`). Nothing in the
package imports this module.
"""

from __future__ import annotations

from gpusessions.hub.configure import TEMPLATES, configure_hub
from gpusessions.hub.keep import KeepHandler, WarningsHandler
from gpusessions.hub.release import ReleaseGPUHandler

__all__ = ["TEMPLATES", "KeepHandler", "ReleaseGPUHandler", "WarningsHandler", "configure_hub"]
