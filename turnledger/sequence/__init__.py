"""Building the message graph from committed turns, and the validator (pure)."""

from turnledger.sequence.arguments import argument_digest_of
from turnledger.sequence.builder import (
    append,
    blocks_from_submission,
    sequence_of,
    submit,
    tool_edges,
    validate_blocks,
)
from turnledger.sequence.graph_state import CallRecord, GraphState, ResultRecord
from turnledger.sequence.rules import RULES, Rule
from turnledger.sequence.validation import Invalid, Rejection, Valid, ValidationOutcome, Waiting

__all__ = [
    "RULES",
    "CallRecord",
    "GraphState",
    "Invalid",
    "Rejection",
    "ResultRecord",
    "Rule",
    "Valid",
    "ValidationOutcome",
    "Waiting",
    "append",
    "argument_digest_of",
    "blocks_from_submission",
    "sequence_of",
    "submit",
    "tool_edges",
    "validate_blocks",
]
