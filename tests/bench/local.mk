# tests/bench: carmy-bench's rounds, figures and refusals against a real
# carmyd (and a real Redis when one is installed).
TESTS += tests/bench/carmy-bench.test
dist_check_SCRIPTS += tests/bench/carmy-bench.test
