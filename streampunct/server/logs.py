"""The server's structured logs: one JSON object a line, an event and its fields."""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger("streampunct.server")


def log_event(level: int, event: str, **fields: Any) -> None:
    log.log(level, event, extra={"fields": fields})


class JsonFormatter(logging.Formatter):
    """Structured logs: one JSON object a line."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        entry.update(getattr(record, "fields", {}))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)
