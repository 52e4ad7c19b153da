"""The hub's gpusessions routes: every endpoint module's `default_handlers`, joined by
`hub/routes.py` in the order the hub has always served them (a pattern that matches the path
of a later one must stay before it)."""

from __future__ import annotations

from traitlets.config import Config

from gpusessions.hub import handlers, routes
from gpusessions.hub.configure import TEMPLATES, configure_hub

ROUTES = [
    (r"/api/gpusessions/users/([^/]+)/gpu", "GPUStateHandler"),
    (r"/api/gpusessions/users/([^/]+)/gpu/release", "ServerReleaseHandler"),
    (r"/gpusessions/notices", "NoticesPage"),
    (r"/api/gpusessions/availability", "AvailabilityHandler"),
    (r"/api/gpusessions/users/([^/]+)/warnings", "WarningsHandler"),
    (r"/api/gpusessions/users/([^/]+)/keep", "KeepHandler"),
    (r"/api/gpusessions/users/([^/]+)/release", "ReleaseGPUHandler"),
    (r"/api/gpusessions/users/([^/]+)/servers/([^/]+)/release", "ReleaseGPUHandler"),
    (r"/api/gpusessions/users/([^/]+)/cull", "CullHandler"),
    (r"/api/gpusessions/users/([^/]+)/servers/([^/]+)/cull", "CullHandler"),
    (r"/api/gpusessions/users/([^/]+)/jobdefinitions", "DefinitionsHandler"),
    (r"/api/gpusessions/users/([^/]+)/jobdefinitions/([^/]+)", "DefinitionHandler"),
    (r"/api/gpusessions/users/([^/]+)/jobdefinitions/([^/]+)/jobs", "DefinitionRunHandler"),
    (r"/api/gpusessions/users/([^/]+)/jobs", "JobsHandler"),
    (r"/api/gpusessions/users/([^/]+)/jobs/sizes", "JobSizesHandler"),
    (r"/api/gpusessions/users/([^/]+)/jobs/([^/]+)", "JobHandler"),
    (r"/api/gpusessions/users/([^/]+)/jobs/([^/]+)/log", "JobLogHandler"),
]


def test_configure_hub_adds_every_route_in_order_after_the_configs_own() -> None:
    c = Config()
    mine = (r"/mine", object)
    c.JupyterHub.extra_handlers = [mine]
    c.JupyterHub.template_paths = ["/my/templates"]
    configure_hub(c)
    assert c.JupyterHub.extra_handlers[0] == mine
    assert [(p, h.__name__) for p, h in c.JupyterHub.extra_handlers[1:]] == ROUTES
    assert c.JupyterHub.template_paths == [TEMPLATES, "/my/templates"]
    assert [(p, h.__name__) for p, h in routes.default_handlers] == ROUTES


def test_the_old_import_path_still_configures_the_hub() -> None:
    assert handlers.configure_hub is configure_hub
