# common/: small helpers every part links (libcommon.la): the clocks, whole
# writes, execution ids and ages as text, carmy-run's result format, the
# service manager's protocols (LISTEN_FDS, NOTIFY_SOCKET), the default
# socket paths, how much of a mapping is in huge pages, and the names of
# carmyd's threads.
# The log carmyd and its stores write is a library of its own (liblog.la),
# so that libcarmy and the plugins do not carry it.
noinst_LTLIBRARIES += common/libcommon.la
common_libcommon_la_SOURCES = common/clock.h common/io.h common/io.c \
	common/execid.h common/execid.c common/age.h common/age.c \
	common/runfmt.h common/runfmt.c common/daemonize.h common/daemonize.c \
	common/service.h common/service.c common/sockpath.h common/sockpath.c \
	common/hugepage.h common/hugepage.c common/thread.h
common_libcommon_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden

noinst_LTLIBRARIES += common/liblog.la
common_liblog_la_SOURCES = common/log.h common/log.c
common_liblog_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden
