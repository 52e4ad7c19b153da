"""The idle-claim culler: a JupyterHub service named `gpusessions`.

It joins the cluster's GPU sessions (claims and holders, from watches) with
the hub's users and servers and the agents' GPU activity, decides per session
by a policy (`policy.py`), and acts: warn, stop the server and release the
GPU, or clean up orphans.

One concern per module: `app.py` (settings and start-up: a traitlets
Application), `cycle.py` (inventory -> decisions -> actions), `policy.py` and
`contention.py` (the decisions, pure), `model.py` (a session, joined from the
objects), `kube.py` and `hub.py` (the two APIs), `web.py` (admin page, JSON
API, actions), `metrics.py` (Prometheus). The hub's side (adding this service to a hub config) is
`gpusessions.hub.cullerservice`; the culler imports nothing of the hub.
"""
