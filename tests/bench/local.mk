# tests/bench: carmy-bench's rounds, figures and refusals against a real
# carmyd (and a real Redis when one is installed); make bench-ab's script
# (bench/bench_ab.sh), this build against itself; bench-journal's and
# bench-shared's script (bench/bench_make.sh), briefly; carmy-stall and
# make bench-stall's script.
TESTS += tests/bench/carmy-bench.test
dist_check_SCRIPTS += tests/bench/carmy-bench.test
TESTS += tests/bench/bench-ab.test
dist_check_SCRIPTS += tests/bench/bench-ab.test
TESTS += tests/bench/bench-make.test
dist_check_SCRIPTS += tests/bench/bench-make.test
TESTS += tests/bench/carmy-stall.test
dist_check_SCRIPTS += tests/bench/carmy-stall.test

# carmy-bench.test's hold of carmyd's segment population (preloaded): a
# real shared object, not installed.
check_LTLIBRARIES += tests/bench/populate_gate.la
tests_bench_populate_gate_la_SOURCES = tests/bench/populate_gate.c tests/gate.h
tests_bench_populate_gate_la_LDFLAGS = -module -avoid-version -shared \
	-rpath /nowhere
