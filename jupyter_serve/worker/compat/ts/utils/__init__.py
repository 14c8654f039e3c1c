"""`ts.utils`: helpers for handlers (see `ts.utils.util`)."""

from __future__ import annotations
