"""The code the orchestration executes in a kernel to park it or restore it.

`park_source` and `restore_source` give Python source for an execute_request
(silent=False, store_history=False). Each publishes exactly one display_data with the
report under `MIME` and nothing else: no print, no warning, no execute_result, no name left
in the user's namespace (the source is one statement; its only name is deleted again), and
it never raises into the kernel, even where this package is not installed.

    park report:    {"ok", "dir", "bytes", "seconds", "saved", "not_saved": [{"name", "type",
                     "reason"}], "error"}
    restore report: {"ok", "parked_at", "restored", "not_restored": [{"name", "reason"}],
                     "notices", "bytes", "seconds", "error"}
"""

from __future__ import annotations

import contextlib
import io
import warnings
from typing import Any

from IPython import get_ipython
from IPython.display import display

from gpusessions.park import restorer, saver
from gpusessions.park.files import DEFAULT_CHUNK

MIME = "application/vnd.gpusessions.park+json"

# One try statement: if the package cannot be imported, the report says so (in the same
# MIME type) instead of a traceback in the user's notebook.
_TEMPLATE = """\
try:
    __import__("gpusessions.park.kernelcode", fromlist=["_"]).{call}
except Exception as _gpusessions_park_error:
    __import__("IPython.display", fromlist=["_"]).display(
        {{{mime!r}: {{"ok": False, "error": "the park code failed in this kernel: %s: %s"
                     % (type(_gpusessions_park_error).__name__, _gpusessions_park_error), {empty}}}}},
        raw=True,
    )
"""


def _source(call: str, empty: str) -> str:
    return _TEMPLATE.format(call=call, mime=MIME, empty=empty)


def park_source(target_dir: str, limit_bytes: int, chunk_bytes: int = DEFAULT_CHUNK) -> str:
    call = f"run_park({str(target_dir)!r}, {int(limit_bytes)!r}, {int(chunk_bytes)!r})"
    empty = f'"dir": {str(target_dir)!r}, "bytes": 0, "seconds": 0.0, "saved": [], "not_saved": []'
    return _source(call, empty)


def restore_source(park_dir: str, device: str | None = None) -> str:
    call = f"run_restore({str(park_dir)!r}, {device!r})"
    empty = '"parked_at": "", "restored": [], "not_restored": [], "notices": [], "bytes": 0, "seconds": 0.0'
    return _source(call, empty)


def _ipython() -> Any:
    ip = get_ipython()
    if ip is None:
        raise RuntimeError("not running in an IPython kernel")
    return ip


@contextlib.contextmanager
def _quiet() -> Any:
    """Whatever user code a serializer calls (a __reduce__ that prints) or a library warns
    stays out of the notebook: the report is the only output."""
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        yield


def run_park(target_dir: str, limit_bytes: int, chunk_bytes: int = DEFAULT_CHUNK) -> None:
    ip = _ipython()
    with _quiet():
        report = saver.park(ip.user_ns, target_dir, limit_bytes, chunk_bytes, set(ip.user_ns_hidden))
    display({MIME: report}, raw=True)


def run_restore(park_dir: str, device: str | None = None) -> None:
    ip = _ipython()
    with _quiet():
        report = restorer.restore(ip.user_ns, park_dir, device)
    display({MIME: report}, raw=True)
