check_PROGRAMS += tests/libclient/check_canon
TESTS += tests/libclient/check_canon
tests_libclient_check_canon_SOURCES = tests/libclient/check_canon.c libclient/canon.c libclient/canon.h
tests_libclient_check_canon_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(MSGPACK_CFLAGS) $(XXHASH_CFLAGS)
tests_libclient_check_canon_LDADD = libclient/libwire.la $(CHECK_LIBS) $(MSGPACK_LIBS) $(XXHASH_LIBS)
