# common/: small helpers every part links (libcommon.la): the clocks, whole
# writes, execution ids as text, and the log carmyd and its stores write.
noinst_LTLIBRARIES += common/libcommon.la
common_libcommon_la_SOURCES = common/clock.h common/io.h common/io.c \
	common/execid.h common/execid.c common/log.h common/log.c
common_libcommon_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden
