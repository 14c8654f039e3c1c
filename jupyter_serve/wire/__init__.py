"""What both sides of the server<->worker pipe share, stdlib only: the wire protocol
(`protocol`), the error model (`errors`), KServe's Open Inference Protocol tensors (`oip`)
and log-safe text (`logsafe`). The Jupyter server, the workers, the kernel side and
`archive/` all import from here; nothing here imports them."""
