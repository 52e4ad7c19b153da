"""The GPU agent: runs in the holder pod and reports what its GPU is doing.

    python -m gpusessions.agent [--port 9400] [--interval 2] [--busy-threshold 5]

It finds its devices through NVML (pynvml): the GPUs NVML sees in the container
and, on a GPU in MIG mode, its MIG devices (the NVIDIA DRA driver's CDI injection
sets NVIDIA_VISIBLE_DEVICES=void; UUIDs named there are used as they are). It
reads them and serves `/api/status` (JSON), `/metrics` (Prometheus text) and
`/healthz`. NVML missing or failing is reported in the status, never a
crash loop. With GPUSESSIONS_FAKE_NVML=<config.json> it uses the simulated
NVML of `fakenvml` (the local cluster and tests).
"""
