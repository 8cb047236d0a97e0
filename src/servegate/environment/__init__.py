"""Environment fingerprints: what a server says about itself, and a managed engine's host."""

from servegate.environment.host import cpu, gpus, host_environment, interpreter, python_packages
from servegate.environment.server import ServerInfo, server_info

__all__ = [
    "ServerInfo",
    "cpu",
    "gpus",
    "host_environment",
    "interpreter",
    "python_packages",
    "server_info",
]
