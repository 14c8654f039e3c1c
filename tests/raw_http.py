"""A raw HTTP/1.1 keep-alive client connection, for tests that must see which side of the
server (the serve lane or tornado) holds a connection and what bytes it answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Raw:
    """One keep-alive client connection speaking HTTP/1.1 by hand."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def response(self) -> tuple[int, dict[str, str], bytes]:
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding") == "chunked":
            body = await self._chunks()
        else:
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return int(status_line.split()[1]), headers, body

    async def _chunks(self) -> bytes:
        body = b""
        while size := int((await self.reader.readuntil(b"\r\n")).strip(), 16):
            body += await self.reader.readexactly(size)
            await self.reader.readexactly(2)
        await self.reader.readexactly(2)
        return body

    async def closed_by_server(self) -> bool:
        return await self.reader.read() == b""


@asynccontextmanager
async def connected(port: int) -> AsyncIterator[Raw]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield Raw(reader, writer)
    finally:
        writer.close()
        await writer.wait_closed()
