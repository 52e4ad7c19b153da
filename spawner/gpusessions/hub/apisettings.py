"""The settings of the hub's gpusessions API itself (`c.GPUSessionsAPI`): how large a request
body any of its routes reads (base.py checks it before a handler runs)."""

from __future__ import annotations

from typing import Any

from traitlets import Int
from traitlets.config import Configurable

from gpusessions.core.bodies import MAX_BODY_BYTES


class GPUSessionsAPI(Configurable):
    """Settings of the /hub/api/gpusessions/ routes (`c.GPUSessionsAPI`)."""

    max_body_bytes = Int(
        MAX_BODY_BYTES,
        min=1024,
        help="""The largest request body, in bytes, any /hub/api/gpusessions/ route reads
        (default 64 KiB; the largest real body, a job definition with its parameters, is a few
        KiB). A larger body is answered 413 from its Content-Length, before it is parsed;
        tornado's own limit (100 MB) stays the server's.""",
    ).tag(config=True)


def api_settings(handler: Any) -> GPUSessionsAPI:
    return GPUSessionsAPI(config=handler.settings.get("config"))
