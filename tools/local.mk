# tools/: programs people run.

# carmy-run: wraps a command with idempotency.
bin_PROGRAMS += tools/carmy-run
tools_carmy_run_SOURCES = tools/carmy-run.c tools/json.h tools/json.c
tools_carmy_run_CFLAGS = $(AM_CFLAGS) $(MSGPACK_CFLAGS)
tools_carmy_run_LDADD = libclient/libcarmy.la $(MSGPACK_LIBS)
