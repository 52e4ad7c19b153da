"""The idle-claim culler: a JupyterHub service named `gpusessions`.

It joins the cluster's GPU sessions (claims and holders, from watches) with
the hub's users and servers and the agents' GPU activity, decides per session
by a policy (`policy.py`), and acts: warn, stop the server and release the
GPU, or clean up orphans.
"""
