"""The validator rules' edges that the one-case-per-rule tests leave open (mutation survivors of
`sequence/rules.py`): each test pins the exact reason codes and details of one boundary."""

from __future__ import annotations
