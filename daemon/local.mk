# daemon/: carmyd.
bin_PROGRAMS += daemon/carmyd
daemon_carmyd_SOURCES = daemon/carmyd.h daemon/main.c daemon/server.c \
	daemon/store.c daemon/owners.c daemon/log.h daemon/log.c \
	daemon/journal.h daemon/journal_int.h daemon/journal.c \
	daemon/journal_recover.c daemon/journal_index.c \
	daemon/journal_compact.c daemon/store_mem.c
daemon_carmyd_CFLAGS = $(AM_CFLAGS) $(URCU_CFLAGS) $(MSGPACK_CFLAGS) $(XXHASH_CFLAGS)
daemon_carmyd_LDADD = libclient/libcarmy.la shm/libshm.la libclient/libwire.la \
	$(URCU_LIBS) $(MSGPACK_LIBS) $(XXHASH_LIBS)
