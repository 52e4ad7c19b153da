"""Tensors: GPU tensors copied to the host in bounded chunks, modules and optimizers kept whole.

torch is not in the project's environment (a CUDA wheel with its nvidia-* dependencies is
2.8 GB; docs/parking.md). The chunking is tested everywhere with a stand-in tensor that
says it is on cuda:0 and records every copy to the host; the rest runs where torch is
installed: `make torch-check` (marked `torch`, deselected in `make test`)."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpusessions.park import torchio
from gpusessions.park.restorer import restore
from gpusessions.park.saver import park


class Device:
    def __init__(self, name: str) -> None:
        self.name, self.type = name, name.split(":")[0]

    def __str__(self) -> str:
        return self.name


class FakeTensor:
    """The methods torchio uses, over a numpy array, on a pretend device."""

    copies: list[int] = []

    def __init__(self, a: np.ndarray, device: str = "cuda:0") -> None:
        self.a, self.device, self._device = a, Device(device), device
        self.dtype, self.shape, self.requires_grad = "torch.float32", a.shape, False

    def detach(self) -> FakeTensor:
        return self

    def is_contiguous(self) -> bool:
        return bool(self.a.flags.c_contiguous)

    def contiguous(self) -> FakeTensor:
        return FakeTensor(np.ascontiguousarray(self.a), self._device)

    def reshape(self, n: int) -> FakeTensor:
        return FakeTensor(self.a.reshape(n), self._device)

    def view(self, dtype: Any) -> FakeTensor:
        return FakeTensor(self.a.view(np.uint8), self._device)

    def __getitem__(self, s: slice) -> FakeTensor:
        return FakeTensor(self.a[s], self._device)

    def to(self, device: str) -> FakeTensor:
        assert device == "cpu"
        FakeTensor.copies.append(self.a.nbytes)
        return FakeTensor(self.a.copy(), "cpu")

    def numpy(self) -> np.ndarray:
        assert self._device == "cpu", "numpy() of a GPU tensor"
        return self.a

    def numel(self) -> int:
        return int(self.a.size)

    def element_size(self) -> int:
        return int(self.a.itemsize)


FAKE_TORCH = types.SimpleNamespace(
    uint8="uint8", nn=types.SimpleNamespace(Parameter=type("Parameter", (), {}))
)


def test_a_gpu_tensor_reaches_the_host_a_chunk_at_a_time(tmp_path: Path) -> None:
    a = np.arange(10 * 2**20 // 4, dtype=np.float32).reshape(1024, -1)
    FakeTensor.copies = []
    meta = torchio.write_tensor(tmp_path / "t", FakeTensor(a.T), FAKE_TORCH, chunk=1 << 20)  # not contiguous
    assert max(FakeTensor.copies) <= 1 << 20 and sum(FakeTensor.copies) == a.nbytes
    assert len(FakeTensor.copies) == 10
    assert (tmp_path / "t").read_bytes() == np.ascontiguousarray(a.T).tobytes()
    assert meta["bytes"] == a.nbytes and meta["device"] == "cuda:0"


try:
    import torch
except ImportError:
    torch = None
# Run by `make torch-check` (torch from PyPI beside the venv: 2.8 GB, so not in `make test`,
# which deselects the marker); selected without torch, they fail rather than skip.
needs_torch = pytest.mark.torch


@needs_torch
def test_module_optimizer_and_tensors_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(8, 64)).sum().backward()
    opt.step()
    ns: dict[str, Any] = {
        "model": model,
        "opt": opt,
        "w": torch.randn(300, 300, dtype=torch.bfloat16),
        "mask": torch.rand(100) > 0.5,
        "view": torch.arange(20.0).reshape(4, 5).t(),
        "loader": torch.utils.data.DataLoader(list(range(10)), num_workers=2),
        "plain_loader": torch.utils.data.DataLoader(list(range(10))),
    }
    r = park(ns, tmp_path / "p", 1 << 30, 1 << 16)
    assert r["ok"], r
    assert {
        "name": "loader",
        "type": "torch.utils.data.dataloader.DataLoader",
        "reason": "DataLoader with workers",
    } in r["not_saved"]
    new: dict[str, Any] = {}
    rr = restore(new, tmp_path / "p")
    assert rr["ok"] and set(rr["restored"]) == set(r["saved"]), rr
    for k in ("w", "mask", "view"):
        assert torch.equal(new[k], ns[k]) and new[k].dtype == ns[k].dtype
    x = torch.randn(2, 64)
    assert torch.equal(new["model"](x), model(x))
    p0 = next(new["model"].parameters())
    assert isinstance(p0, torch.nn.Parameter) and p0.requires_grad
    # The optimizer's state refers to the restored model's own parameters (one object).
    assert new["opt"].param_groups[0]["params"][0] is p0
    assert torch.equal(new["opt"].state[p0]["exp_avg"], opt.state[next(model.parameters())]["exp_avg"])


@needs_torch
def test_a_cuda_tensor_in_a_cpu_only_kernel_comes_back_on_the_cpu(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        # The CPU-only restore needs a kernel without CUDA: on a GPU machine the tensor goes back
        # to the GPU instead.
        pytest.skip("a CPU-only kernel's restore cannot be shown where CUDA is available")
    ns = {"model": torch.nn.Linear(4, 2), "t": torch.arange(6.0)}
    assert park(ns, tmp_path / "p", 1 << 30)["ok"]
    # As a park on a GPU server writes it: the devices are cuda:0.
    m = tmp_path / "p" / "manifest.json"
    m.write_text(json.dumps(json.loads(m.read_text())).replace('"device": "cpu"', '"device": "cuda:0"'))
    new: dict[str, Any] = {}
    rr = restore(new, tmp_path / "p")
    assert rr["ok"], rr
    assert "model: parked on cuda:0, restored on CPU: this server has no GPU" in rr["notices"]
    assert "t: parked on cuda:0, restored on CPU: this server has no GPU" in rr["notices"]
    assert torch.equal(new["t"], ns["t"]) and new["t"].device.type == "cpu"
