"""The hub side: what runs inside JupyterHub.

The spawner (`GPUSessionSpawner`), the lifecycle of one server's GPU
(`session`), the picker form and availability endpoint, the hub's own
endpoints (release), notices to users and the one-document hub setup.
"""
