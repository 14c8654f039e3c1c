"""TorchServe's `Context`: what a handler learns about its model and the batch it serves.

The worker builds one `Context` per model, as TorchServe does: `initialize` gets it and
every batch is attached to it (`with_requests`), so what a handler keeps on it
(`context.cache`, `stopping_criteria`) lasts from call to call. Its constructor keeps
`ts.context.Context`'s positional signature, so handler unit tests written against
TorchServe build it the same way::

    Context(model_name, model_dir, manifest, batch_size, gpu, mms_version,
            limit_max_image_pixels=True, metrics=None, model_yaml_config=None)

Per request `idx` the handler reads request headers and sets the response status,
content type and headers through the context; each request's state lives in a
`RequestProcessor` (`context.request_processor[idx]`), as in TorchServe.

While the worker serves a batch, `chunk_sink` sends intermediate results to the
server (TorchServe's `send_intermediate_predict_response`, see `streaming`); it is
None outside a batch and when the context was built by hand.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jupyter_serve.wire.protocol import StreamChunk
from jupyter_serve.worker.metrics import MetricsCache

SERVER_NAME = "MMS"  # TorchServe still reports the Multi Model Server name.
SEQUENCE_ID_HEADER = "ts_request_sequence_id"
SEQUENCE_START_HEADER = "ts_request_sequence_start"
SEQUENCE_END_HEADER = "ts_request_sequence_end"
SEQUENCE_HEADER_ENV = {  # TorchServe's backend reads its sequence header names from these
    "header_key_sequence_id": ("TS_REQUEST_SEQUENCE_ID", SEQUENCE_ID_HEADER),
    "header_key_sequence_start": ("TS_REQUEST_SEQUENCE_START", SEQUENCE_START_HEADER),
    "header_key_sequence_end": ("TS_REQUEST_SEQUENCE_END", SEQUENCE_END_HEADER),
}
CONTENT_TYPE = "content-type"


class RequestProcessor:
    """One request's headers in, and its response status and headers out."""

    def __init__(self, request_header: Mapping[str, Any] | None = None) -> None:
        self._request_header: dict[str, Any] = dict(request_header or {})
        self._status_code = 200
        self._reason_phrase = ""
        self._response_header: dict[str, str] = {}

    def get_request_property(self, key: str) -> Any:
        """The header `key`; HTTP header names are case-insensitive, so `Content-Type`,
        `content-type` and tornado's title-cased names all find the same value."""
        if key in self._request_header:
            return self._request_header[key]
        folded = key.lower()
        for name, value in self._request_header.items():
            if name.lower() == folded:
                return value
        return None

    def get_request_properties(self) -> dict[str, Any]:
        return self._request_header

    def report_status(self, code: int, reason_phrase: str | None = None) -> None:
        self._status_code = int(code)
        self._reason_phrase = reason_phrase or ""

    def get_response_status_code(self) -> int:
        return self._status_code

    def get_response_status_phrase(self) -> str:
        return self._reason_phrase

    def add_response_property(self, key: str, value: Any) -> None:
        self._response_header[str(key)] = str(value)

    def get_response_headers(self) -> dict[str, str]:
        return self._response_header

    def get_response_header(self, key: str) -> str | None:
        return self._response_header.get(key)

    def content_type(self) -> str | None:
        """The response content type the handler set, whatever the header's case."""
        for key, value in self._response_header.items():
            if key.lower() == CONTENT_TYPE:
                return value
        return None

    def other_headers(self) -> dict[str, str]:
        """The response headers the handler set, content type excluded."""
        return {k: v for k, v in self._response_header.items() if k.lower() != CONTENT_TYPE}


class Context:
    """The handler's view of its model and of the current batch."""

    header_key_sequence_id: str  # the sequence headers' names (SEQUENCE_HEADER_ENV)
    header_key_sequence_start: str
    header_key_sequence_end: str

    def __init__(
        self,
        model_name: str,
        model_dir: str,
        manifest: Mapping[str, Any],
        batch_size: int,
        gpu: int | None,
        mms_version: str,
        limit_max_image_pixels: bool = True,
        metrics: MetricsCache | None = None,
        model_yaml_config: Mapping[str, Any] | None = None,
        torch_burst_threads: int | None = None,
    ) -> None:
        self.model_name = model_name
        self.manifest = dict(manifest)
        self._system_properties: dict[str, Any] = {
            "model_dir": model_dir,
            "gpu_id": gpu,
            "batch_size": batch_size,
            "server_name": SERVER_NAME,
            "server_version": mms_version,
            "limit_max_image_pixels": limit_max_image_pixels,
        }
        # jupyter_serve's own: the threads for a short heavy pass (server/pool/cores.py);
        # an attribute, so that system_properties stay exactly TorchServe's
        self.torch_burst_threads = torch_burst_threads
        self.request_ids: dict[int, str] = {}
        self._request_processor: list[RequestProcessor] = []
        self.metrics = metrics if metrics is not None else MetricsCache(model_name)
        self.model_yaml_config: dict[str, Any] = dict(model_yaml_config or {})
        self.stopping_criteria: Any = None
        self.cl_socket: Any = None
        self.chunk_sink: Callable[[StreamChunk], None] | None = None
        for attribute, (variable, default) in SEQUENCE_HEADER_ENV.items():
            setattr(self, attribute, os.environ.get(variable, default))

    def with_requests(
        self, request_ids: Sequence[str], headers: Sequence[Mapping[str, Any]]
    ) -> Context:
        """Attach a batch: request `idx` has id `request_ids[idx]` and `headers[idx]`."""
        self.request_ids = dict(enumerate(request_ids))
        self._request_processor = [RequestProcessor(h) for h in headers]
        return self

    @property
    def system_properties(self) -> dict[str, Any]:
        return self._system_properties

    @property
    def request_processor(self) -> list[RequestProcessor]:
        return self._request_processor

    @request_processor.setter
    def request_processor(self, value: Sequence[RequestProcessor]) -> None:
        self._request_processor = list(value)

    def get_request_id(self, idx: int = 0) -> str | None:
        return self.request_ids.get(idx)

    def get_request_header(self, idx: int, key: str) -> Any:
        return self._request_processor[idx].get_request_property(key)

    def get_all_request_header(self, idx: int) -> dict[str, Any]:
        return self._request_processor[idx].get_request_properties()

    def set_response_content_type(self, idx: int, value: str) -> None:
        self.set_response_header(idx, CONTENT_TYPE, value)

    def get_response_content_type(self, idx: int) -> str | None:
        return self._request_processor[idx].content_type()

    def get_response_status(self, idx: int) -> tuple[int, str]:
        processor = self._request_processor[idx]
        return processor.get_response_status_code(), processor.get_response_status_phrase()

    def set_response_status(self, code: int = 200, phrase: str = "", idx: int = 0) -> None:
        if idx < len(self._request_processor):
            self._request_processor[idx].report_status(code, phrase)

    def set_all_response_status(self, code: int = 200, phrase: str = "") -> None:
        for idx in range(len(self._request_processor)):
            self.set_response_status(code, phrase, idx)

    def get_response_headers(self, idx: int) -> dict[str, str]:
        return self._request_processor[idx].get_response_headers()

    def get_response_header(self, idx: int, key: str) -> str | None:
        return self._request_processor[idx].get_response_header(key)

    def set_response_header(self, idx: int, key: str, value: Any) -> None:
        self._request_processor[idx].add_response_property(key, value)

    def get_sequence_id(self, idx: int) -> str | None:
        value = self._request_processor[idx].get_request_property(self.header_key_sequence_id)
        return None if value is None else str(value)

    def __repr__(self) -> str:
        return f"Context(model_name={self.model_name!r}, request_ids={self.request_ids})"
