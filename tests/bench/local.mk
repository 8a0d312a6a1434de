# tests/bench: carmy-bench's rounds, figures and refusals against a real
# carmyd (and a real Redis when one is installed); make bench-ab's script
# (bench/bench_ab.sh), this build against itself; bench-journal's and
# bench-shared's script (bench/bench_make.sh), briefly.
TESTS += tests/bench/carmy-bench.test
dist_check_SCRIPTS += tests/bench/carmy-bench.test
TESTS += tests/bench/bench-ab.test
dist_check_SCRIPTS += tests/bench/bench-ab.test
TESTS += tests/bench/bench-make.test
dist_check_SCRIPTS += tests/bench/bench-make.test
