# tests/tools: the programs in tools/, end to end against a real carmyd.
TESTS += tests/tools/carmy-run.test
dist_check_SCRIPTS += tests/tools/carmy-run.test
TESTS += tests/tools/carmyctl.test
dist_check_SCRIPTS += tests/tools/carmyctl.test

# A call's arguments shown to an operator (tools/mpjson.c, tools/text.c).
check_PROGRAMS += tests/tools/check_mpjson
TESTS += tests/tools/check_mpjson
tests_tools_check_mpjson_SOURCES = tests/tools/check_mpjson.c \
	tools/mpjson.h tools/mpjson.c tools/json.h tools/json.c \
	tools/text.h tools/text.c
tests_tools_check_mpjson_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_tools_check_mpjson_LDADD = $(CHECK_LIBS)

# carmyctl.test's journal of an earlier release: RESERVE records rewritten
# without their call.
check_PROGRAMS += tests/tools/journal_uncall
tests_tools_journal_uncall_SOURCES = tests/tools/journal_uncall.c
tests_tools_journal_uncall_LDADD = stores/libstores.la common/libcommon.la \
	$(XXHASH_LIBS)

# carmy-run.test's hold of COMMAND's exec (preloaded): a real shared
# object, not installed.
check_LTLIBRARIES += tests/tools/exec_gate.la
tests_tools_exec_gate_la_SOURCES = tests/tools/exec_gate.c tests/gate.h
tests_tools_exec_gate_la_LDFLAGS = -module -avoid-version -shared \
	-rpath /nowhere
