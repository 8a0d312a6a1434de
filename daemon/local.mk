# daemon/: carmyd.
bin_PROGRAMS += daemon/carmyd
daemon_carmyd_SOURCES = daemon/carmyd.h daemon/main.c daemon/server.h \
	daemon/server.c daemon/request.c daemon/conn.c daemon/store.c \
	daemon/forget.c daemon/retain.c daemon/owners.c
daemon_carmyd_CFLAGS = $(AM_CFLAGS) $(URCU_CFLAGS) $(MSGPACK_CFLAGS) $(XXHASH_CFLAGS)
daemon_carmyd_LDADD = libclient/libcarmy.la stores/libstores.la shm/libshm.la \
	libclient/libwire.la common/liblog.la common/libcommon.la \
	$(URCU_LIBS) $(MSGPACK_LIBS) $(XXHASH_LIBS)
