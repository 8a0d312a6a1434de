# libclient/: libcarmy, the one installed library. Only carmy_* is exported.
noinst_LTLIBRARIES += libclient/libwire.la
libclient_libwire_la_SOURCES = libclient/wire.h libclient/wire.c
libclient_libwire_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden $(MSGPACK_CFLAGS)
libclient_libwire_la_LIBADD = $(MSGPACK_LIBS)

# The checks a client makes of the carmyd it finds (libcarmy, carmyctl).
noinst_LTLIBRARIES += libclient/libtrust.la
libclient_libtrust_la_SOURCES = libclient/trust.h libclient/trust.c
libclient_libtrust_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden

lib_LTLIBRARIES += libclient/libcarmy.la
libclient_libcarmy_la_SOURCES = libclient/client.c libclient/errors.c \
	libclient/canon.h libclient/canon.c
libclient_libcarmy_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden -pthread \
	$(URCU_CFLAGS) $(MSGPACK_CFLAGS) $(XXHASH_CFLAGS)
libclient_libcarmy_la_LIBADD = shm/libshm.la libclient/libwire.la \
	libclient/libtrust.la common/libcommon.la \
	$(MSGPACK_LIBS) $(XXHASH_LIBS)
libclient_libcarmy_la_LDFLAGS = -pthread -version-info 0:0:0 \
	-export-symbols-regex '^carmy_'

include libclient/canon.mk

check_PROGRAMS += tests/libclient/check_wire
TESTS += tests/libclient/check_wire
tests_libclient_check_wire_SOURCES = tests/libclient/check_wire.c
tests_libclient_check_wire_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(MSGPACK_CFLAGS)
tests_libclient_check_wire_LDADD = libclient/libwire.la $(CHECK_LIBS) $(MSGPACK_LIBS)

check_PROGRAMS += tests/libclient/check_trust
TESTS += tests/libclient/check_trust
tests_libclient_check_trust_SOURCES = tests/libclient/check_trust.c
tests_libclient_check_trust_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_libclient_check_trust_LDADD = libclient/libtrust.la \
	$(CHECK_LIBS)
