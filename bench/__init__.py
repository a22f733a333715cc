"""Benchmarks: each `bench/bench_*.py` module with a `main()` is run by `python -m bench` (`make bench`)."""
