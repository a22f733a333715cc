"""The demo's partition processor, as its own process (the second core of a 2-core box).

`python -m turnledger.demo.processor BOOTSTRAP PREFIX` — SIGTERM commits and exits.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from turnledger.demo.fold import fold_factory


def main(argv: list[str]) -> int:
    from turnledger.processors.runtime import ProcessorApp, ProcessorConfig
    from turnledger.processors.topics import Topics

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s processor %(levelname)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # retried NOT_ENOUGH_REPLICAS races are noise here
    bootstrap, prefix = argv[0], argv[1]
    config = ProcessorConfig(
        bootstrap=bootstrap, app_id=f"{prefix}turnledger", topics=Topics(prefix=prefix), batch_max_ms=20
    )
    app = ProcessorApp(config, fold_factory(prefix))
    asyncio.run(app.run())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
