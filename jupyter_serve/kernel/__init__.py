"""The kernel side: what runs in a user's IPython kernel (or any Python process) and talks
to the Jupyter server over HTTP only: the magics (`magics`, `magic_parsers`), the HTTP
client (`client`) and how it finds the server (`discovery`), background tasks, one-line
failures, the `%%handler` workspace, and the notebook widgets (`widgets/`).

The public import paths `jupyter_serve.client` and `jupyter_serve.widgets` name the same
objects."""
