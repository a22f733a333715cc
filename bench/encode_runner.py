"""Encode ingress events with whichever `turnledger` is first on `PYTHONPATH` (a baseline tree).

Run as a script (`python bench/encode_runner.py EVENTS.pickle RECORDS.pickle`): EVENTS holds
(key, record name, the event's JSON dump); each is validated by that tree's model of the name and
encoded by that tree's codec, so a baseline that predates a schema version gets the workload in
the schema versions it reads. `bench_dispatch_engine --baseline` uses it for a tree without delta
runs (streaming/runs.py): the same deltas, expanded, as that tree's worker would have appended them.
"""

from __future__ import annotations

import pickle
import sys


def main(events_path: str, records_path: str) -> None:
    from turnledger.codec import default_codec, encode

    models = {name.rsplit(".", 1)[-1]: model for name, model in default_codec().models.items()}
    with open(events_path, "rb") as f:
        events = pickle.load(f)
    rows = [(key, encode(models[name].model_validate(data))) for key, name, data in events]
    with open(records_path, "wb") as f:
        pickle.dump(rows, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
