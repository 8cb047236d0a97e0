"""Managed engines: servegate starts the engine itself, measures its start-up, scans its log."""

from servegate.config.redaction import shown_command
from servegate.managed.launcher import Managed, launch
from servegate.managed.logscan import LogPattern, load_catalogue, scan, scan_file

__all__ = [
    "LogPattern",
    "Managed",
    "launch",
    "load_catalogue",
    "scan",
    "scan_file",
    "shown_command",
]
