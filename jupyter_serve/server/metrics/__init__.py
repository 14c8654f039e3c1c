"""The server's metrics: TorchServe's families and the handlers' own (`serve_metrics`,
`family`), their configuration (`config`), host figures (`host`) and the Prometheus and
TorchServe log exposition (`exposition`)."""
