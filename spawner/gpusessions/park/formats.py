"""The file formats of a park: .npy for arrays, Arrow IPC for frames, cloudpickle for the rest.

Arrays are written by us in numpy's own .npy layout (header by numpy, data in chunks with a
running checksum, never pickled), so any numpy reads them back with `np.load(allow_pickle=False)`
even without this package. Frames go to Arrow IPC (Feather v2): columnar, every pandas dtype
with its index, readable by `pandas.read_feather`. Everything else is one cloudpickle per
name, in which arrays and tensors are not pickled but referred to (pickle's persistent ids)
and kept in files of their own: the same object in two places is one file, restored as one
object. docs/parking.md says why these and what was measured.
"""

from __future__ import annotations

import io
import os
import pickle
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pandas as pd
import pyarrow as pa

from gpusessions.park.files import DEFAULT_CHUNK, FILE_MODE, CheckedWriter, Damaged, check_size, file_crc

ARROW_ERRORS: tuple[type[BaseException], ...] = (pa.ArrowException, ValueError, TypeError)


# --- numpy -------------------------------------------------------------------------------


def _array_chunks(arr: np.ndarray, chunk: int) -> Iterator[memoryview]:
    """The array's bytes in the .npy order (C, or Fortran when only F-contiguous), in chunks
    of at most `chunk` bytes; a non-contiguous array is copied a block of rows at a time."""
    if arr.flags.c_contiguous or arr.flags.f_contiguous:
        data = arr if arr.flags.c_contiguous else arr.T
        flat = memoryview(data.reshape(-1).view(np.uint8))
        for i in range(0, len(flat), chunk):
            yield flat[i : i + chunk]
        return
    row = max(arr[0].nbytes, 1) if arr.shape[0] else 1
    step = max(chunk // row, 1)
    for i in range(0, arr.shape[0], step):
        yield memoryview(np.ascontiguousarray(arr[i : i + step]).reshape(-1).view(np.uint8))


def write_npy(path: Path, arr: np.ndarray, chunk: int = DEFAULT_CHUNK) -> dict[str, Any]:
    header = np.lib.format.header_data_from_array_1_0(arr)
    head = io.BytesIO()
    try:
        np.lib.format.write_array_header_1_0(head, header)
    except ValueError:  # a header over 64 KiB (a structured dtype with many fields)
        head = io.BytesIO()
        np.lib.format.write_array_header_2_0(head, header)
    with CheckedWriter(path) as w:
        w.write(head.getvalue())
        w.write_chunks(_array_chunks(arr, chunk))
    return {
        "format": "npy",
        "bytes": w.size,
        "crc32": w.crc,
        "dtype": arr.dtype.str,
        "shape": list(arr.shape),
    }


def read_npy(path: Path, meta: dict[str, Any] | None, chunk: int = DEFAULT_CHUNK) -> np.ndarray:
    """The array, its length and checksum checked against `meta` (None: unchecked, for a
    park whose manifest is lost; the .npy header still says shape and dtype)."""
    if meta is not None:
        check_size(path, int(meta["bytes"]))
    with open(path, "rb", buffering=0) as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        if dtype.hasobject:
            raise Damaged("an object array (would need unpickling)")
        offset = f.tell()
        f.seek(0)
        crc = zlib.crc32(f.read(offset))
        arr = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
        data = arr.T if fortran else arr
        target = memoryview(data.reshape(-1).view(np.uint8))
        crc = _read_into(f, target, crc, chunk, path)
    if meta is not None and crc != int(meta["crc32"]):
        raise Damaged(f"file damaged: checksum mismatch in {path.name}")
    return arr


def _read_into(f: Any, target: memoryview, crc: int, chunk: int, path: Path) -> int:
    done = 0
    while done < len(target):
        n = f.readinto(target[done : done + chunk])
        if not n:
            raise Damaged(f"file truncated: {done / 2**20:.0f} of {len(target) / 2**20:.0f} MiB data")
        crc = zlib.crc32(target[done : done + n], crc)
        done += n
    return crc


# --- pandas --------------------------------------------------------------------------------


def frame_of(value: pd.DataFrame | pd.Series) -> pd.DataFrame:
    return value.to_frame(name="series") if isinstance(value, pd.Series) else value


def write_frame(path: Path, value: pd.DataFrame | pd.Series) -> dict[str, Any]:
    """Arrow IPC, uncompressed (a copy at memory speed; compression would cost CPU in the
    minute a reclaim leaves). Raises one of ARROW_ERRORS for what Arrow cannot hold (mixed
    Python objects in a column, duplicate column names): the caller pickles it instead."""
    df = frame_of(value)
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
    meta: dict[str, Any] = {"format": "arrow", "bytes": size, "crc32": crc}
    return meta


def read_frame(path: Path, meta: dict[str, Any] | None, series: bool) -> pd.DataFrame | pd.Series:
    if meta is not None:
        check_size(path, int(meta["bytes"]))
        if file_crc(path)[1] != int(meta["crc32"]):
            raise Damaged(f"file damaged: checksum mismatch in {path.name}")
    with pa.memory_map(str(path)) as source:
        df = pa.ipc.open_file(source).read_all().to_pandas()
    return df.iloc[:, 0] if series else df


# --- everything else -------------------------------------------------------------------------


class RefPickler(cloudpickle.Pickler):
    """cloudpickle, except that what `ref` names (arrays, tensors) is referred to, not pickled."""

    def __init__(self, file: io.BytesIO, ref: Callable[[Any], str | None]) -> None:
        super().__init__(file, protocol=5)
        self._ref = ref

    def persistent_id(self, obj: Any) -> str | None:
        return self._ref(obj)


class RefUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, load: Callable[[str], Any]) -> None:
        super().__init__(file)
        self._load = load

    def persistent_load(self, pid: Any) -> Any:
        return self._load(str(pid))


def dumps(value: Any, ref: Callable[[Any], str | None]) -> bytes:
    buf = io.BytesIO()
    RefPickler(buf, ref).dump(value)
    return buf.getvalue()


def loads(data: bytes, load: Callable[[str], Any]) -> Any:
    return RefUnpickler(io.BytesIO(data), load).load()
