"""Which NVML the agent talks to: pynvml, or the simulated one when configured."""

from __future__ import annotations

import os
from types import ModuleType

from gpusessions.agent import fakenvml

FAKE_ENV = "GPUSESSIONS_FAKE_NVML"


def load() -> ModuleType:
    """The NVML module: `gpusessions.agent.fakenvml` if GPUSESSIONS_FAKE_NVML is set, else pynvml."""
    if os.environ.get(FAKE_ENV):
        fakenvml.configure(os.environ[FAKE_ENV])
        return fakenvml
    # Imported only here: the simulated cluster's holders (and the tests) run the agent with
    # the fake NVML, where the NVIDIA bindings need not be installed.
    import pynvml

    return pynvml
