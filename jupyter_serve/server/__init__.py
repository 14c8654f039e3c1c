"""The Jupyter server process: the extension app and its config (`app`, `app_config`),
the REST routes (`http/`), the model registry (`registry/`), the worker pool (`pool/`),
batching, metrics (`metrics/`), inference keys and the JupyterHub authorizer (`hub`).

Nothing here runs model code: models run in worker processes (`jupyter_serve.worker`),
reached over the wire protocol (`jupyter_serve.wire`)."""
