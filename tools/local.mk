# tools/: the programs people run.

# carmy-run: wraps a command with idempotency.
bin_PROGRAMS += tools/carmy-run
tools_carmy_run_SOURCES = tools/carmy-run.c tools/json.h tools/json.c \
	tools/supervise.h tools/supervise.c
tools_carmy_run_CFLAGS = $(AM_CFLAGS) $(MSGPACK_CFLAGS)
tools_carmy_run_LDADD = libclient/libcarmy.la common/libcommon.la $(MSGPACK_LIBS)

# carmyctl: the operator's tool. It reads the segment and the journal with
# carmyd's own code (shm/, stores/) and speaks the wire protocol.
bin_PROGRAMS += tools/carmyctl
tools_carmyctl_SOURCES = tools/carmyctl.c tools/json.h tools/json.c \
	tools/text.h tools/text.c tools/mpjson.h tools/mpjson.c
tools_carmyctl_CFLAGS = $(AM_CFLAGS) $(MSGPACK_CFLAGS) $(XXHASH_CFLAGS) -pthread
tools_carmyctl_LDADD = libclient/libcarmy.la stores/libstores.la shm/libshm.la \
	libclient/libwire.la libclient/libtrust.la common/liblog.la common/libcommon.la \
	$(MSGPACK_LIBS) $(XXHASH_LIBS) -lpthread
