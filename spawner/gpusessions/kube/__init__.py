"""The Kubernetes edge: the one place the hub side talks to the API server.

`api` wraps the calls a session makes (create, read, delete, patch claims and
pods); `watch` keeps the shared list+watch caches of slices, claims, device
classes and holder pods that the picker and the spawner read.
"""
