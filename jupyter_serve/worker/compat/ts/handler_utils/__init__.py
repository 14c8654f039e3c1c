"""`ts.handler_utils`: helpers for handlers (see `ts.handler_utils.utils`)."""

from __future__ import annotations
