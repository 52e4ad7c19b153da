"""The hub side: what runs inside JupyterHub.

The spawner (`GPUSessionSpawner`), the lifecycle of one server's GPU
(`session`), a new claim's admission into its team's queue (`admission`), the
picker form and its figures, notices to users and the one-document hub setup.
The hub's own endpoints follow JupyterHub's pattern: a base handler (`base`),
each endpoint module's `default_handlers`, one list of them all (`routes`),
enabled by `configure.configure_hub(c)`. Imports core and kube, never the culler.
"""
