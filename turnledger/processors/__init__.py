"""The Kafka runtime: exactly-once partition processors around a pure fold.

`contract` the runtime ↔ fold contract (records in, outputs out, a per-partition store);
`runtime` the partition processor and the app running one per partition; `store` the state
stores, the batch overlay and changelog restore; `writer` batched writes into a transaction;
`topics` the creation of the topics of `turnledger.topology`; `dispatch_partition` the
dispatch engine as a partition fold; `fold_spec` loading a fold by `module:attr`;
`multiproc` `--processes N`; `cli` the `turnledger process` command.
"""
