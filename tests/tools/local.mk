# tests/tools: the programs in tools/, end to end against a real carmyd.
TESTS += tests/tools/carmy-run.test
dist_check_SCRIPTS += tests/tools/carmy-run.test
TESTS += tests/tools/carmyctl.test
dist_check_SCRIPTS += tests/tools/carmyctl.test
