# examples/: code written to be read and copied.

# The example store plugin, built as a real shared object for
# tests/e2e/check_store_plugin; not installed.
check_LTLIBRARIES += examples/carmy_store_text.la
examples_carmy_store_text_la_SOURCES = examples/store_text.c
examples_carmy_store_text_la_CFLAGS = $(AM_CFLAGS) -pthread
examples_carmy_store_text_la_LDFLAGS = -module -avoid-version -shared \
	-rpath /nowhere
