"""turnledger: the canonical ledger between LLM gateways and model providers."""

__version__ = "0.1.0"
