"""Structured logs: one JSON object per line, or plain text for people.

Rules: every record about a reconcile carries the object key and the reconcile id
(passed through ``extra``); credentials are never logged, so nothing here redacts.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

__all__ = ["configure_logging"]

_CONTEXT_FIELDS = ("key", "reconcile_id", "result", "duration", "writes", "error")


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object with the context fields it carries."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as a JSON line."""
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in _CONTEXT_FIELDS:
            if hasattr(record, field):
                entry[field] = getattr(record, field)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """Human-readable lines with the context fields appended as key=value."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as one line of text."""
        base = f"{record.levelname:<7} {record.name}: {record.getMessage()}"
        extra = " ".join(f"{f}={getattr(record, f)}" for f in _CONTEXT_FIELDS if hasattr(record, f))
        line = f"{base} {extra}" if extra else base
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure_logging(level: str = "info", fmt: str = "text") -> None:
    """Send logs to stderr in ``fmt`` ("json" or "text") at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
