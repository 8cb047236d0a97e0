"""Endpoints: the protocol gates see, the values they get back, and the OpenAI HTTP client.

The client lives in `servegate.endpoints.http` (`OpenAIEndpoint`, `open_endpoint`) so that
importing the protocol and value types does not import aiohttp.
"""

from servegate.endpoints.errors import EndpointError, ErrorCategory, RequestError
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.types import (
    Completion,
    Embeddings,
    RawResponse,
    Timing,
    TokenLogprob,
    ToolCall,
    Usage,
)

__all__ = [
    "Completion",
    "Embeddings",
    "Endpoint",
    "EndpointError",
    "ErrorCategory",
    "RawResponse",
    "RequestError",
    "Timing",
    "TokenLogprob",
    "ToolCall",
    "Usage",
]
