"""The pure core: what a GPU session is, with no I/O.

Sizes and their device matches, the claim and holder builders, the notebook
pod's GPU parts (`notebook_pod`), a profile's GPU request (`requests`), labels,
the scheduler's queues and quotas (`queues.QueuePolicy`), option validation,
availability counting and the words a waiting user reads. Everything here
takes plain values and returns plain values; the Kubernetes edge
(`gpusessions.kube`) and the hub side (`gpusessions.hub`) use it.
"""
