"""pandas frames and series to Arrow IPC (Feather v2) files and back.

pyarrow is imported when a frame is written or read, not before: a kernel that never
imported pandas pays nothing for it in a park or a restore (pandas with pyarrow take about
half a second to import on a shared 2-core machine). The frame is whatever pandas object the
kernel holds (this module imports no pandas itself).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpusessions.park.files import FILE_MODE, Damaged, check_size, file_crc


def arrow_errors() -> tuple[type[BaseException], ...]:
    """What Arrow raises for what it cannot hold (the caller pickles that frame instead)."""
    import pyarrow as pa

    return (pa.ArrowException, ValueError, TypeError)


def write_frame(path: Path, value: Any) -> dict[str, Any]:
    """Arrow IPC, uncompressed (a copy at memory speed; compression would cost CPU in the
    minute a reclaim leaves). Raises one of arrow_errors() for what Arrow cannot hold (mixed
    Python objects in a column, duplicate column names)."""
    import pyarrow as pa

    df = value.to_frame(name="series") if value.ndim == 1 else value
    if not df.columns.is_unique:
        raise ValueError("duplicate column names")
    table = pa.Table.from_pandas(df, preserve_index=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    del table
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    size, crc = file_crc(path)
    return {"format": "arrow", "bytes": size, "crc32": crc}


def read_frame(path: Path, meta: dict[str, Any] | None, series: bool) -> Any:
    import pyarrow as pa

    if meta is not None:
        check_size(path, int(meta["bytes"]))
        if file_crc(path)[1] != int(meta["crc32"]):
            raise Damaged(f"file damaged: checksum mismatch in {path.name}")
    with pa.memory_map(str(path)) as source:
        df = pa.ipc.open_file(source).read_all().to_pandas()
    return df.iloc[:, 0] if series else df
