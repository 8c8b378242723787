"""Logging to stderr and to a rotating file under the data home. Never to stdout (protocol only)."""

from __future__ import annotations

import logging
import sys
from logging.handlers import RotatingFileHandler

from memos_bridge.config import Settings

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(settings: Settings, *, stderr: bool = True) -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(settings.logging.level.upper())
    formatter = logging.Formatter(_FORMAT)
    if stderr:
        err = logging.StreamHandler(sys.stderr)
        err.setFormatter(formatter)
        root.addHandler(err)
    if settings.logging.file:
        try:
            settings.logs_dir.mkdir(parents=True, exist_ok=True)
            file_handler = RotatingFileHandler(
                settings.logs_dir / "memos-bridge.log",
                maxBytes=settings.logging.max_bytes,
                backupCount=settings.logging.backups,
                encoding="utf-8",
            )
            file_handler.setFormatter(formatter)
            root.addHandler(file_handler)
        except OSError as exc:  # a read-only home must not stop the service
            logging.getLogger(__name__).warning("file logging disabled: %s", exc)
    # Libraries that are chatty at INFO.
    for noisy in ("jsonrpcserver", "sqlalchemy.engine", "httpx", "fastembed", "onnxruntime"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
