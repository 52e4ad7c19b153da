"""localcluster: a real Kubernetes control plane with simulated GPU nodes on one machine.

It starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler built
from Go modules (see ../cmd), publishes ResourceSlices shaped like the NVIDIA
DRA driver's from a cluster-shape YAML, and runs a process runtime in place of a
kubelet. Everything listens on 127.0.0.1.
"""
