"""Which NVML the agent talks to: pynvml, or the simulated one when configured."""

from __future__ import annotations

import os
from types import ModuleType

FAKE_ENV = "GPUSESSIONS_FAKE_NVML"


def load() -> ModuleType:
    """The NVML module: `gpusessions.agent.fakenvml` if GPUSESSIONS_FAKE_NVML is set, else pynvml."""
    if os.environ.get(FAKE_ENV):
        from gpusessions.agent import fakenvml

        fakenvml.configure(os.environ[FAKE_ENV])
        return fakenvml
    import pynvml

    return pynvml
