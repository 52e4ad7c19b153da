"""The hub side: what runs inside JupyterHub.

The spawner (`GPUSessionSpawner`), the lifecycle of one server's GPU
(`session`), a new claim's admission into its team's queue (`admission`), the
picker form and availability endpoint, the hub's own
endpoints (release), notices to users and the one-document hub setup.
"""
