"""The demo's partition processor, as its own process (the second core of a 2-core box).

`python -m turnledger.demo.processor BOOTSTRAP PREFIX` — SIGTERM commits and exits.
"""

from __future__ import annotations

import asyncio
import logging
import sys


def main(argv: list[str]) -> int:
    from turnledger.processors.app import ProcessorApp
    from turnledger.processors.config import ProcessorConfig
    from turnledger.processors.dispatch_partition import DispatchPartitionFold
    from turnledger.topology import Topics

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s processor %(levelname)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # its retry warnings are noise here
    bootstrap, prefix = argv[0], argv[1]
    topics = Topics(prefix=prefix)
    config = ProcessorConfig(
        bootstrap=bootstrap, app_id=f"{prefix}turnledger", topics=topics, batch_max_ms=20
    )
    app = ProcessorApp(config, lambda partition: DispatchPartitionFold(topics, partition))
    asyncio.run(app.run())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
