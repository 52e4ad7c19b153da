"""JupyterHub scopes gpusessions asks for and grants, once.

Read by the spawner (a notebook server's token), the hub's endpoints (who may act on a
server), the hub config that registers the culler service, and the culler's admin page.
"""

from __future__ import annotations

# Seeing every held GPU and releasing or keeping it (the culler's admin page).
ADMIN = "custom:gpusessions:admin"
ADMIN_DESCRIPTION = "See every held GPU and release or keep it (gpusessions admin page)."
# What the culler's own token may do: list users and their servers with activity, stop servers.
CULLER = ("list:users", "read:users:name", "read:users:activity", "read:servers", "servers")
# A notebook server's token: the `server` role's scopes, plus reading and keeping this one
# server's GPU (its warning, "Keep my GPU", its GPU panel), never the user's other servers.
SERVER_TOKEN = ("access:servers!server", "users:activity!user", "read:servers!server", "servers!server")
# The scopes the hub's endpoints check: reading a server's GPU, and acting on it.
READ_SERVERS = "read:servers"
SERVERS = "servers"
# Reading GPU availability (the team's quota, the cluster's figures): the right to use one's servers.
ACCESS_SERVERS = "access:servers"


def on_user_or_server(scope: str, user: str, server: str | None) -> list[str]:
    """`scope` filtered to the user, and also to that one server when `server` is given: holding
    either is enough (a notebook server's own token holds the second only)."""
    wanted = [f"{scope}!user={user}"]
    if server is not None:
        wanted.append(f"{scope}!server={user}/{server}")
    return wanted
