"""servegate: prove that an LLM serving change is correct before it is fast."""

__version__ = "0.1.0"

__all__ = ["__version__"]
