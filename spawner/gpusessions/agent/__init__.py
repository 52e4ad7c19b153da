"""The GPU agent: runs in the holder pod and reports what its GPU is doing.

    python -m gpusessions.agent [--port 9400] [--interval 2] [--busy-threshold 5]

It reads the devices in NVIDIA_VISIBLE_DEVICES (GPU and MIG UUIDs) through
NVML (pynvml) and serves `/api/status` (JSON), `/metrics` (Prometheus text)
and `/healthz`. NVML missing or failing is reported in the status, never a
crash loop. With GPUSESSIONS_FAKE_NVML=<config.json> it uses the simulated
NVML of `fakenvml` (the local cluster and tests).
"""
