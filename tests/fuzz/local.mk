# tests/fuzz: libFuzzer targets (make fuzz)
#
#   make fuzz [FUZZ_SECONDS=60] [FUZZ_ARGS=...]
#       build each target with clang (libFuzzer + ASan + UBSan) and run it
#       for FUZZ_SECONDS on a copy of its seed corpus; fails on a crash,
#       a leak, a timeout or a broken invariant (the input is left in
#       tests/fuzz/run/<target>/)
#   make fuzz-build       only build the targets
#   make fuzz-regress     run each target once over the reproducers kept in
#                         tests/fuzz/crashes/<target>/ (if any)
#   make fuzz-corpus      regenerate the seed corpora in the source tree
#   make fuzz-clean       remove the targets and the run directories
#
# The targets are built with clang directly, not with the automake CC
# (usually gcc, which has no libFuzzer), from the sources of shm/ and
# libclient/ they exercise. Fuzzing is not part of make check.
#
#   fuzz_wire     the bytes of one client connection, as carmyd handles them
#                 (wire_scan, wire_decode, shm_record_result, shm_reclaim,
#                 the dead-owner sweep), and canon on them as arguments
#   fuzz_segment  shm_sane, carmyd's sweep/reclaim/repair and the client's
#                 reserve/read/release over a segment of arbitrary bytes
#   fuzz_journal  the journal store's check, recovery, load, compaction at
#                 start and append over a journal file built from the input

FUZZ_CC = clang
FUZZ_SECONDS = 60
# Extra libFuzzer flags for every run, e.g. FUZZ_ARGS='-jobs=2 -workers=2'.
FUZZ_ARGS =
# -fno-sanitize-recover: a UBSan report must stop the run like an ASan one,
# or libFuzzer would not count it.
FUZZ_CFLAGS = -g -O1 -fno-omit-frame-pointer \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-Wall -Wextra
# shm/atomic.h maps the segment's atomics to __atomic builtins when
# CARMY_ATOMIC_BUILTINS is defined (or under TSan), and to liburcu
# otherwise, whose x86 cmpxchg is inline assembly that ASan cannot
# instrument: an out-of-bounds CAS would go unseen. So the fuzzers ask for
# the builtins, and ASan checks every CAS too. The two are the same
# operations on one thread. Set FUZZ_ATOMICS= to fuzz liburcu's assembly.
FUZZ_ATOMICS = -DCARMY_ATOMIC_BUILTINS
FUZZ_CPPFLAGS = -include $(top_builddir)/config.h \
	-I$(top_srcdir)/include -I$(top_srcdir) $(FUZZ_ATOMICS) \
	$(URCU_CFLAGS) $(MSGPACK_CFLAGS) $(XXHASH_CFLAGS)
FUZZ_LIBS = $(MSGPACK_LIBS) $(XXHASH_LIBS) -lpthread

FUZZ_SHM_SRCS = $(top_srcdir)/shm/segment.c $(top_srcdir)/shm/table.c \
	$(top_srcdir)/shm/sweep.c $(top_srcdir)/shm/post.c
FUZZ_WIRE_SRCS = $(top_srcdir)/libclient/wire.c
FUZZ_CANON_SRCS = $(top_srcdir)/libclient/canon.c
FUZZ_JOURNAL_SRCS = $(top_srcdir)/stores/journal/file.c \
	$(top_srcdir)/stores/journal/record.c \
	$(top_srcdir)/stores/journal/index.c \
	$(top_srcdir)/stores/journal/recover.c \
	$(top_srcdir)/stores/journal/compact.c \
	$(top_srcdir)/stores/journal/journal.c $(top_srcdir)/common/log.c \
	$(top_srcdir)/common/io.c
# Makefile too: a change of FUZZ_* flags rebuilds the targets.
FUZZ_DEPS = Makefile $(top_builddir)/config.h \
	$(top_srcdir)/tests/fuzz/fuzz_common.h \
	$(top_srcdir)/shm/shm.h $(top_srcdir)/shm/atomic.h \
	$(top_srcdir)/include/carmy.h $(top_srcdir)/libclient/wire.h \
	$(top_srcdir)/libclient/canon.h $(top_srcdir)/common/io.h

FUZZ_TARGETS = wire segment journal
FUZZ_BINS = tests/fuzz/fuzz_wire tests/fuzz/fuzz_segment \
	tests/fuzz/fuzz_journal

tests/fuzz/fuzz_wire: $(top_srcdir)/tests/fuzz/fuzz_wire.c $(FUZZ_SHM_SRCS) \
		$(FUZZ_WIRE_SRCS) $(FUZZ_CANON_SRCS) $(FUZZ_DEPS)
	@$(MKDIR_P) tests/fuzz
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_CPPFLAGS) \
		$(top_srcdir)/tests/fuzz/fuzz_wire.c $(FUZZ_SHM_SRCS) \
		$(FUZZ_WIRE_SRCS) $(FUZZ_CANON_SRCS) $(FUZZ_LIBS) -o $@

tests/fuzz/fuzz_segment: $(top_srcdir)/tests/fuzz/fuzz_segment.c \
		$(FUZZ_SHM_SRCS) $(FUZZ_DEPS)
	@$(MKDIR_P) tests/fuzz
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_CPPFLAGS) \
		$(top_srcdir)/tests/fuzz/fuzz_segment.c $(FUZZ_SHM_SRCS) \
		$(FUZZ_LIBS) -o $@

# Growing the file 64 KiB at a time rather than carmyd's 16 MiB: the same
# code, a hundred times more inputs a second.
tests/fuzz/fuzz_journal: $(top_srcdir)/tests/fuzz/fuzz_journal.c \
		$(FUZZ_JOURNAL_SRCS) $(FUZZ_DEPS) \
		$(top_srcdir)/stores/stores.h $(top_srcdir)/stores/journal/journal.h \
		$(top_srcdir)/stores/journal/internal.h
	@$(MKDIR_P) tests/fuzz
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_CPPFLAGS) -pthread \
		-DJOURNAL_GROW=65536 \
		$(top_srcdir)/tests/fuzz/fuzz_journal.c $(FUZZ_JOURNAL_SRCS) \
		$(FUZZ_LIBS) -o $@

# The corpus generator is an ordinary program (no libFuzzer main), built
# by make check with the rest: tests/fuzz/corpus.test fails when the seeds
# in the source tree are not what it writes (a segment layout or a wire
# message changed, and a HELLO seed would be refused before anything is
# fuzzed). make fuzz-corpus writes them anew.
check_PROGRAMS += tests/fuzz/gen_corpus
tests_fuzz_gen_corpus_SOURCES = tests/fuzz/gen_corpus.c \
	tests/fuzz/fuzz_common.h
tests_fuzz_gen_corpus_CFLAGS = $(AM_CFLAGS) $(URCU_CFLAGS) \
	$(MSGPACK_CFLAGS) $(XXHASH_CFLAGS)
tests_fuzz_gen_corpus_LDADD = shm/libshm.la libclient/libwire.la \
	$(URCU_LIBS) $(MSGPACK_LIBS) $(XXHASH_LIBS) -lpthread
TESTS += tests/fuzz/corpus.test
dist_check_SCRIPTS += tests/fuzz/corpus.test

fuzz-build: $(FUZZ_BINS)

# fuzz_segment's inputs cover the whole 16 KiB segment (plus the mode
# byte); fuzz_wire's the message cap several times over; fuzz_journal's
# a few dozen records, one of them with a result of some KiB.
FUZZ_MAXLEN_wire = 4096
FUZZ_MAXLEN_segment = 16385
FUZZ_MAXLEN_journal = 16384

fuzz: $(FUZZ_BINS)
	@set -e; for t in $(FUZZ_TARGETS); do \
	  run=tests/fuzz/run/$$t; \
	  rm -rf $$run; $(MKDIR_P) $$run/corpus; \
	  cp $(top_srcdir)/tests/fuzz/corpus/$$t/* $$run/corpus/; \
	  case $$t in wire) max=$(FUZZ_MAXLEN_wire);; \
	    journal) max=$(FUZZ_MAXLEN_journal);; \
	    *) max=$(FUZZ_MAXLEN_segment);; esac; \
	  echo "fuzz_$$t: $(FUZZ_SECONDS) s on $$run/corpus"; \
	  if ! ./tests/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) \
	       -max_len=$$max -timeout=10 -print_final_stats=1 \
	       -artifact_prefix=$$run/ $(FUZZ_ARGS) $$run/corpus \
	       >$$run/log 2>&1; then \
	    tail -n 60 $$run/log; \
	    echo "fuzz_$$t FAILED: see $$run/log and the input in $$run/"; \
	    ls $$run | grep -E '^(crash|leak|timeout|oom|slow-unit)-' || :; \
	    exit 1; \
	  fi; \
	  grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|Done)' \
	    $$run/log || :; \
	done

fuzz-regress: $(FUZZ_BINS)
	@set -e; for t in $(FUZZ_TARGETS); do \
	  d=$(top_srcdir)/tests/fuzz/crashes/$$t; \
	  test -d $$d || continue; \
	  set -- $$d/*; test -e "$$1" || continue; \
	  echo "fuzz_$$t: replaying $$d"; \
	  ./tests/fuzz/fuzz_$$t -runs=1 "$$@"; \
	done

fuzz-corpus: tests/fuzz/gen_corpus
	rm -rf $(top_srcdir)/tests/fuzz/corpus
	./tests/fuzz/gen_corpus $(top_srcdir)/tests/fuzz/corpus

fuzz-clean:
	rm -rf tests/fuzz/run
	rm -f $(FUZZ_BINS)

.PHONY: fuzz fuzz-build fuzz-regress fuzz-corpus fuzz-clean

EXTRA_DIST += tests/fuzz/fuzz_common.h tests/fuzz/fuzz_wire.c \
	tests/fuzz/fuzz_segment.c tests/fuzz/fuzz_journal.c \
	tests/fuzz/corpus tests/fuzz/crashes tests/fuzz/README.md

CLEANFILES += $(FUZZ_BINS)
