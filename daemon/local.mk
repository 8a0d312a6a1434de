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

# The PostgreSQL store (daemon/store_pg.c): a shared store plugin, built
# when libpq is found and installed in pkglibdir as carmy_store_pg.so.
if HAVE_LIBPQ
pkglib_LTLIBRARIES += daemon/carmy_store_pg.la
daemon_carmy_store_pg_la_SOURCES = daemon/store_pg.c
daemon_carmy_store_pg_la_CFLAGS = $(AM_CFLAGS) $(LIBPQ_CFLAGS) -pthread
daemon_carmy_store_pg_la_LDFLAGS = -module -avoid-version -shared
daemon_carmy_store_pg_la_LIBADD = $(LIBPQ_LIBS) -lpthread
endif
