"""Encode ingress events with whichever `turnledger` is first on `PYTHONPATH` (a baseline tree).

Run as a script (`python bench/encode_runner.py EVENTS.pickle RECORDS.pickle`): EVENTS holds
(key, record name, the event's JSON dump, its fields at their default); each is validated by that
tree's model of the name and encoded by that tree's codec, so a baseline that predates a schema
version gets the workload in the schema versions it reads. `bench_dispatch_engine --baseline` uses it
for a tree without delta runs (streaming/runs.py): the same deltas, expanded, as that tree's worker
would have appended them. A field that tree lacks is left out if it holds its default here, else the
event is refused (the tree could not say the same).
"""

from __future__ import annotations

import pickle
import sys
from typing import Any


def main(events_path: str, records_path: str) -> None:
    from turnledger.codec import default_codec, encode

    models = {name.rsplit(".", 1)[-1]: model for name, model in default_codec().models.items()}
    with open(events_path, "rb") as f:
        events = pickle.load(f)
    rows = [
        (key, encode(models[name].model_validate(_known(name, models[name], data, set(at_default)))))
        for key, name, data, at_default in events
    ]
    with open(records_path, "wb") as f:
        pickle.dump(rows, f)


def _known(name: str, model: Any, data: dict[str, Any], at_default: set[str]) -> dict[str, Any]:
    """`data` without the fields this tree's model lacks, each of which must hold its default in the
    current tree (the event then means the same to this tree); else this tree cannot read the event."""
    unknown = [field for field in data if field not in model.model_fields]
    meaningful = [field for field in unknown if field not in at_default]
    if meaningful:
        raise SystemExit(
            f"{name}: this tree has no field {meaningful} (not at its default): it cannot read the event"
        )
    return {field: value for field, value in data.items() if field not in unknown}


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
