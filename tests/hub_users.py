"""The hub's user models the hub-token tests answer with: ann owns the server; bob may
run her models; dan has access alone; eve has the serve scope but no access here."""

from __future__ import annotations

ACCESS = "access:servers!user=ann"
EXECUTE = "custom:jupyter_server:execute:serve!user=ann"
USERS = {
    "ann-token": {"kind": "user", "name": "ann", "scopes": [ACCESS]},
    "bob-token": {"kind": "user", "name": "bob", "scopes": [ACCESS, EXECUTE]},
    "dan-token": {"kind": "user", "name": "dan", "scopes": [ACCESS]},
    "eve-token": {"kind": "user", "name": "eve", "scopes": [EXECUTE]},
}
