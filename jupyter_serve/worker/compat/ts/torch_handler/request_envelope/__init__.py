"""`ts.torch_handler.request_envelope`: envelopes from `jupyter_serve.handlers.envelopes`."""
