"""Which names of a kernel's namespace a park considers, and how each value is kept.

Decided from the value's type alone, before anything is serialized, so a value that cannot
outlive its process (an open file, a thread) is named with a reason the user understands
instead of a serializer's traceback, and arrays, frames and tensors go to formats of their
own rather than into a pickle.
"""

from __future__ import annotations

import importlib
import io
import re
import socket
import subprocess
import sys
import threading
import types
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

# IPython's own names in user_ns: the history (In, Out, _, __, ___, _i, _ii, _iii, _i<N>,
# _<N>, _ih, _oh, _dh), the exit helpers, get_ipython, and dunders (__builtins__, __name__).
IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})
IPYTHON_PATTERN = re.compile(r"^(_|__|___|_i+|_i\d+|_\d+|_ih|_oh|_dh|__\w*__)$")

# Kinds (the manifest's "kind"):
IMPORT = "import"  # a module: re-imported
GLOBAL = "global"  # a function or class importable by module and qualified name
ARRAY = "array"  # numpy ndarray, non-object dtype: .npy
FRAME = "frame"  # pandas DataFrame: Arrow IPC (Feather v2)
SERIES = "series"  # pandas Series: Arrow IPC, one column
TENSOR = "tensor"  # torch.Tensor (strided, not quantized): raw bytes, copied in chunks
PICKLE = "pickle"  # the rest: cloudpickle, arrays and tensors inside kept apart
ALIAS = "alias"  # the same object as an earlier name
UNSAVEABLE = "unsaveable"

_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()), threading.Condition, threading.Semaphore)


def visible_names(namespace: dict[str, Any], hidden: set[str] | frozenset[str]) -> list[str]:
    """The user's names, in the namespace's order (the order they were first bound)."""
    return [
        n
        for n in namespace
        if isinstance(n, str) and n not in hidden and n not in IPYTHON_NAMES and not IPYTHON_PATTERN.match(n)
    ]


def type_name(value: Any) -> str:
    t = type(value)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


@dataclass
class Decision:
    kind: str
    reason: str = ""
    module: str = ""
    qualname: str = ""


def torch_module() -> Any:
    """torch if the kernel imported it, else None: a park never imports torch itself."""
    return sys.modules.get("torch")


def is_tensor(value: Any) -> bool:
    torch = torch_module()
    if torch is None or not isinstance(value, torch.Tensor):
        return False
    return (
        value.layout == torch.strided
        and not value.is_quantized
        and value.device.type != "meta"
        and type(value) in (torch.Tensor, torch.nn.Parameter)
    )


def unsaveable_reason(value: Any) -> str:
    """Why this value cannot be kept, or "" when it may be."""
    if isinstance(value, io.IOBase) and not value.closed:
        return "open file handle"
    if isinstance(value, types.GeneratorType | types.AsyncGeneratorType):
        return "generator"
    if isinstance(value, types.CoroutineType):
        return "coroutine"
    if isinstance(value, socket.socket):
        return "socket"
    if isinstance(value, threading.Thread):
        return "thread"
    if isinstance(value, _LOCK_TYPES):
        return "lock"
    if isinstance(value, subprocess.Popen):
        return "subprocess"
    data = sys.modules.get("torch.utils.data")
    if data is not None and isinstance(value, data.DataLoader) and getattr(value, "num_workers", 0) > 0:
        return "DataLoader with workers"
    return ""


def importable_global(value: Any) -> tuple[str, str] | None:
    """(module, qualname) when `from module import name` gives this very object back.

    Only for functions, classes and builtins of a module other than __main__ that is already
    imported (a park imports nothing new)."""
    if not isinstance(value, types.FunctionType | types.BuiltinFunctionType | type):
        return None
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or module == "__main__":
        return None
    if "<locals>" in qualname or module not in sys.modules:
        return None
    obj: Any = sys.modules[module]
    try:
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        return None
    return (module, qualname) if obj is value else None


def module_importable(name: str) -> bool:
    """A module object of the namespace that a new kernel can import again by name."""
    if name == "__main__":
        return False
    mod = sys.modules.get(name)
    return mod is not None and getattr(mod, "__spec__", None) is not None


def decide(value: Any) -> Decision:
    if isinstance(value, types.ModuleType):
        if module_importable(value.__name__):
            return Decision(IMPORT, module=value.__name__)
        return Decision(UNSAVEABLE, reason=f"module {value.__name__} cannot be imported again")
    reason = unsaveable_reason(value)
    if reason:
        return Decision(UNSAVEABLE, reason=reason)
    found = importable_global(value)
    if found:
        return Decision(GLOBAL, module=found[0], qualname=found[1])
    if type(value) is np.ndarray and not value.dtype.hasobject:
        return Decision(ARRAY)
    if type(value) is pd.DataFrame:
        return Decision(FRAME)
    if type(value) is pd.Series:
        return Decision(SERIES)
    if is_tensor(value):
        return Decision(TENSOR)
    return Decision(PICKLE)


def resolve_global(module: str, qualname: str) -> Any:
    """The object `decide` recorded as GLOBAL, imported again (restore's side)."""
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj
