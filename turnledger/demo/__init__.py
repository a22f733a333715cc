"""`turnledger demo`: the whole system on the local stack, with faults, a report and invariant checks."""
