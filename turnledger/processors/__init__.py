"""The Kafka runtime: exactly-once partition processors around a pure fold.

`contract` the fold's contract (records in, outputs out, a per-partition store); `app` a processor
process (one consumer, signals, failure policy); `ownership` who owns which partition (a static list
or the consumer group, and why moving partitions is exactly once: docs/architecture.md, "The
exactly-once runtime"); `partition` one partition's processor and its terms; `feed` a partition of
the shared consumer; `transaction` one batch as one transaction; `batching` and `folding` a batch in
and through the fold; `store` the state stores and the batch overlay; `changelog` restore and the
position record; `writer` batched writes into a transaction; `config` settings, metrics, exits;
`gc_tuning`; `dispatch_partition` the dispatch engine as a partition fold; `fold_spec` loading a
fold by `module:attr`; `model_registry` the registry it admits with; `topics` creation and checks;
`multiproc` `--processes N`; `cli` the `turnledger process` command. `runtime` re-exports the names
of the module this used to be.
"""
