"""A stand-in for `gpusessions.park.kernelcode` (the in-kernel park package, built on another
branch), for the tests only, with the same contract: `MIME`, `park_source(target_dir,
limit_bytes, chunk_bytes)` and `restore_source(park_dir, device)`, each publishing one
display_data {MIME: report}. It pickles what pickle can; the real package does more (classes
defined in the notebook, closures, tensors). The tests use the real one when it is installed."""

from __future__ import annotations

MIME = "application/vnd.gpusessions.park+json"

_PARK = r"""
def __gps_park(target, limit):
    import os, pickle, time, types
    from IPython.display import display
    t0 = time.monotonic()
    ip = get_ipython()
    hidden = set(ip.user_ns_hidden)
    saved, not_saved, total, error = [], [], 0, None
    for name, value in list(ip.user_ns.items()):
        if name.startswith("_") or name in hidden or isinstance(value, types.ModuleType):
            continue
        if isinstance(value, (types.FunctionType, type)):
            not_saved.append({"name": name, "type": type(value).__name__, "reason": "code (stand-in)"})
            continue
        try:
            data = pickle.dumps(value, protocol=5)
        except Exception as e:
            not_saved.append({"name": name, "type": type(value).__name__, "reason": str(e)[:80]})
            continue
        if total + len(data) > limit:
            not_saved.append({"name": name, "type": type(value).__name__, "reason": "over the limit"})
            continue
        with open(os.path.join(target, name + ".pkl"), "wb") as f:
            f.write(data)
        total += len(data)
        saved.append(name)
    report = {"ok": True, "dir": target, "bytes": total, "seconds": time.monotonic() - t0,
              "saved": saved, "not_saved": not_saved, "error": error}
    display({MIME: report}, raw=True)
__gps_park(TARGET, LIMIT)
del __gps_park
"""

_RESTORE = r"""
def __gps_restore(park):
    import os, pickle, time
    from IPython.display import display
    t0 = time.monotonic()
    ip = get_ipython()
    restored, not_restored, total = [], [], 0
    try:
        names = sorted(n for n in os.listdir(park) if n.endswith(".pkl"))
    except OSError as e:
        names, not_restored = [], [{"name": "*", "reason": str(e)}]
    for n in names:
        try:
            with open(os.path.join(park, n), "rb") as f:
                data = f.read()
            ip.user_ns[n[:-4]] = pickle.loads(data)
            restored.append(n[:-4])
            total += len(data)
        except Exception as e:
            not_restored.append({"name": n[:-4], "reason": str(e)[:80]})
    report = {"ok": True, "parked_at": os.path.getmtime(park), "restored": restored,
              "not_restored": not_restored, "notices": [], "bytes": total,
              "seconds": time.monotonic() - t0}
    display({MIME: report}, raw=True)
__gps_restore(PARK)
del __gps_restore
"""


def park_source(target_dir: str, limit_bytes: int, chunk_bytes: int = 64 << 20) -> str:
    code = _PARK.replace("TARGET", repr(target_dir)).replace("LIMIT", repr(int(limit_bytes)))
    return code.replace("MIME", repr(MIME))


def restore_source(park_dir: str, device: str | None = None) -> str:
    return _RESTORE.replace("PARK", repr(park_dir)).replace("MIME", repr(MIME))
