"""CPU benchmarks of the dse evaluator; run one with ``python -m benchmarks.<name>``."""
