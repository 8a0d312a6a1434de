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
	libclient/version.c libclient/reservation.h \
	libclient/canon.h libclient/canon.c
libclient_libcarmy_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden -pthread \
	$(URCU_CFLAGS) $(MSGPACK_CFLAGS) $(XXHASH_CFLAGS)
libclient_libcarmy_la_LIBADD = shm/libshm.la libclient/libwire.la \
	libclient/libtrust.la common/libcommon.la \
	$(MSGPACK_LIBS) $(XXHASH_LIBS)
# The ABI version, libtool's current:revision:age, which is not the package
# version (AC_INIT, CARMY_VERSION_*). At each release whose libcarmy
# changed:
#   - its source changed, its interface did not: revision + 1;
#   - functions were added (nothing removed or changed): current + 1,
#     revision 0, age + 1;
#   - anything removed or changed incompatibly (a function's signature or
#     meaning, a public struct's size or layout, an enum value): current + 1,
#     revision 0, age 0.
# The soname is libcarmy.so.(current - age): 1:0:0 gives libcarmy.so.1,
# packaged as libcarmy1. A function added or removed is a line added to or
# removed from debian/libcarmy1.symbols (an added one with the version
# that first has it); a new soname is a new package, libcarmyN with its
# own libcarmyN.symbols. tests/debian.test checks both against the build.
# carmy_store.h's plugin ABI is versioned apart, by CARMY_STORE_ABI.
CARMY_LT_VERSION = 1:0:0
libclient_libcarmy_la_LDFLAGS = -pthread -version-info $(CARMY_LT_VERSION) \
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

# carmy_version() against the header's macros and configure's version.
check_PROGRAMS += tests/libclient/check_version
TESTS += tests/libclient/check_version
tests_libclient_check_version_SOURCES = tests/libclient/check_version.c
tests_libclient_check_version_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_libclient_check_version_LDADD = libclient/libcarmy.la $(CHECK_LIBS)

# carmy.h and carmy_store.h from C++, with nothing else on the include path
# and every warning an error: the one use of configure's C++ compiler (the
# library and the tools are C).
if HAVE_CXX
check_PROGRAMS += tests/libclient/check_cxx
TESTS += tests/libclient/check_cxx
tests_libclient_check_cxx_SOURCES = tests/libclient/check_cxx.cc
tests_libclient_check_cxx_CPPFLAGS = -I$(top_srcdir)/include
tests_libclient_check_cxx_CXXFLAGS = -std=c++11 -Wall -Wextra -pedantic -Werror
tests_libclient_check_cxx_LDADD = libclient/libcarmy.la
endif
