"""Enable gpusessions' hub side in a JupyterHub config: its endpoints, its page templates and
the size check at hub start.

    from gpusessions.hub.configure import configure_hub
    configure_hub(c)

(`gpusessions.hub.handlers.configure_hub` is the same function.) The culler service is added
with `gpusessions.hub.cullerservice.configure_culler`; `hubsetup.apply` does both from one
settings document.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpusessions.hub import routes, sizecheck

TEMPLATES = str(Path(__file__).parent / "templates")


def configure_hub(c: Any) -> None:
    """Add the gpusessions endpoints and page templates to a JupyterHub config object."""
    c.JupyterHub.extra_handlers = [
        *list(c.JupyterHub.get("extra_handlers", []) or []),
        *routes.default_handlers,
    ]
    c.JupyterHub.template_paths = [TEMPLATES, *list(c.JupyterHub.get("template_paths", []) or [])]
    sizecheck.schedule(c)
