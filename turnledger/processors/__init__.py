"""The Kafka runtime: exactly-once partition processors around a pure fold.

`fold` the contract (records in, outputs out, a per-partition store); `runtime` the
partition processor and the app running one per partition; `store` the state stores,
the batch overlay and changelog restore; `writer` batched writes into a transaction;
`topics` the topic names and their creation; `cli` the `turnledger process` command.
"""
