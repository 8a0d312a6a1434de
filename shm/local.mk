# shm/: the shared segment, linked into both carmyd and libcarmy.
noinst_LTLIBRARIES += shm/libshm.la
shm_libshm_la_SOURCES = shm/shm.h shm/atomic.h shm/segment.c shm/table.c shm/sweep.c shm/post.c
shm_libshm_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden $(URCU_CFLAGS) $(XXHASH_CFLAGS)
shm_libshm_la_LIBADD = $(XXHASH_LIBS)
