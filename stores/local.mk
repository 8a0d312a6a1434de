# stores/: the back-ends behind carmy_store_ops (include/carmy_store.h).
#
# libstores.la holds the two built into carmyd, "memory" and "journal:DIR";
# carmyctl links it too, to read a journal with carmyd's own code. The
# PostgreSQL store is a plugin of its own.
noinst_LTLIBRARIES += stores/libstores.la
stores_libstores_la_SOURCES = stores/stores.h stores/memory.c \
	stores/journal/journal.h stores/journal/internal.h \
	stores/journal/file.c stores/journal/record.c \
	stores/journal/index.c stores/journal/recover.c \
	stores/journal/compact.c stores/journal/journal.c
stores_libstores_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden -pthread $(XXHASH_CFLAGS)
stores_libstores_la_LIBADD = common/liblog.la common/libcommon.la $(XXHASH_LIBS) -lpthread

# The PostgreSQL store (stores/pg/): a shared store plugin, built when libpq
# is found and installed in pkglibdir as carmy_store_pg.so. Its one exported
# symbol is carmy_store_plugin: what its files share is declared hidden in
# stores/pg/pg.h.
if HAVE_LIBPQ
pkglib_LTLIBRARIES += stores/pg/carmy_store_pg.la
stores_pg_carmy_store_pg_la_SOURCES = stores/pg/pg.h stores/pg/store_pg.c \
	stores/pg/worker.c stores/pg/send.c stores/pg/read.c stores/pg/conn.c \
	stores/pg/rows.c stores/pg/util.c stores/pg/wait.c
stores_pg_carmy_store_pg_la_CFLAGS = $(AM_CFLAGS) $(LIBPQ_CFLAGS) -pthread
stores_pg_carmy_store_pg_la_LDFLAGS = -module -avoid-version -shared
stores_pg_carmy_store_pg_la_LIBADD = common/libcommon.la $(LIBPQ_LIBS) -lpthread
endif
