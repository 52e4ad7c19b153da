"""Tensors to and from files without a whole copy in host memory.

A tensor is written as its raw bytes (C order) with dtype, shape and device in the manifest.
A GPU tensor is copied to the host `chunk` bytes at a time, so a park of a 40 GiB model
needs 64 MiB of host memory, not 40 GiB (torch.save would stage the whole tensor on the
host). On restore a GPU tensor is allocated on the device and filled a chunk at a time from
one reused host buffer. torch is never imported here: the caller passes the kernel's own
module (a park only sees tensors if the kernel imported torch).

Only what a strided tensor offers is used (detach, is_contiguous, contiguous, reshape, view,
slicing, to, numpy, numel, element_size), so a test may drive it with a stand-in object.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

from gpusessions.park.files import DEFAULT_CHUNK, CheckedWriter, Damaged, check_size


def tensor_meta(t: Any, torch: Any) -> dict[str, Any]:
    return {
        "format": "tensor",
        "dtype": str(t.dtype).removeprefix("torch."),
        "shape": list(t.shape),
        "device": str(t.device),
        "requires_grad": bool(t.requires_grad),
        "parameter": isinstance(t, torch.nn.Parameter),
    }


def nbytes(t: Any) -> int:
    return int(t.numel()) * int(t.element_size())


def write_tensor(path: Path, t: Any, torch: Any, chunk: int = DEFAULT_CHUNK) -> dict[str, Any]:
    meta = tensor_meta(t, torch)
    flat = t.detach()
    if not flat.is_contiguous():
        flat = flat.contiguous()  # on the tensor's own device: no host copy
    flat = flat.reshape(-1).view(torch.uint8)
    on_host = t.device.type == "cpu"
    total = nbytes(t)
    with CheckedWriter(path) as w:
        for i in range(0, total, chunk):
            part = flat[i : i + chunk]
            if not on_host:
                part = part.to("cpu")  # at most `chunk` bytes on the host at a time
            w.write(part.numpy())
    meta.update(bytes=w.size, crc32=w.crc)
    return meta


def read_tensor(path: Path, meta: dict[str, Any], device: str, torch: Any, chunk: int = DEFAULT_CHUNK) -> Any:
    check_size(path, int(meta["bytes"]))
    dtype = getattr(torch, str(meta["dtype"]))
    t = torch.empty(meta["shape"], dtype=dtype, device=device)
    flat = t.view(-1).view(torch.uint8)
    total = int(meta["bytes"])
    crc = 0
    with open(path, "rb", buffering=0) as f:
        if t.device.type == "cpu":
            target = memoryview(flat.numpy())
            done = 0
            while done < total:
                n = f.readinto(target[done : done + chunk])
                if not n:
                    raise Damaged(f"file truncated: {done / 2**20:.0f} of {total / 2**20:.0f} MiB")
                crc = zlib.crc32(target[done : done + n], crc)
                done += n
        else:
            buf = torch.empty(min(chunk, max(total, 1)), dtype=torch.uint8)
            view = memoryview(buf.numpy())
            for i in range(0, total, chunk):
                n = f.readinto(view[: min(chunk, total - i)])
                if not n:
                    raise Damaged(f"file truncated: {i / 2**20:.0f} of {total / 2**20:.0f} MiB")
                crc = zlib.crc32(view[:n], crc)
                flat[i : i + n].copy_(buf[:n])
    if crc != int(meta["crc32"]):
        raise Damaged(f"file damaged: checksum mismatch in {path.name}")
    if meta.get("parameter"):
        return torch.nn.Parameter(t, requires_grad=bool(meta.get("requires_grad")))
    if meta.get("requires_grad"):
        t.requires_grad_(True)
    return t
