# bindings/python/: the carmy package for Python, a CPython extension
# (carmy/_carmy.c) over libcarmy and a thin Python layer
# (carmy/__init__.py). Built here as a libtool module when configure found
# Python's headers; pip users build it with setup.py instead.
# python.test runs the pytest suite against the module built here and a
# real carmyd, with the interpreter configure chose ($(PYTHON)).
EXTRA_DIST += bindings/python/setup.py bindings/python/README.md \
	bindings/python/MANIFEST.in \
	bindings/python/carmy/__init__.py bindings/python/carmy/__init__.pyi \
	bindings/python/carmy/_ctl.py \
	bindings/python/carmy/py.typed bindings/python/python.test \
	bindings/python/tests/conftest.py bindings/python/tests/helpers.py \
	bindings/python/tests/test_decorator.py \
	bindings/python/tests/test_call.py \
	bindings/python/tests/test_abandon.py \
	bindings/python/tests/test_processes.py \
	bindings/python/tests/test_operator.py \
	bindings/python/tests/test_async.py \
	bindings/python/tests/test_pack.py

if HAVE_PYTHON
noinst_LTLIBRARIES += bindings/python/carmy/_carmy.la
bindings_python_carmy__carmy_la_SOURCES = bindings/python/carmy/_carmy.c
# Not config.h: Python.h comes first and sets the feature macros itself.
bindings_python_carmy__carmy_la_CPPFLAGS = -I$(top_srcdir)/include
bindings_python_carmy__carmy_la_CFLAGS = $(AM_CFLAGS) $(PYTHON_CFLAGS)
# A shared module (not a convenience library) although never installed.
bindings_python_carmy__carmy_la_LDFLAGS = -module -avoid-version -shared \
	-rpath /nowhere
bindings_python_carmy__carmy_la_LIBADD = libclient/libcarmy.la
if HAVE_PYTEST
TESTS += bindings/python/python.test
AM_TESTS_ENVIRONMENT += CARMY_PYTHON='$(PYTHON)'; export CARMY_PYTHON;
endif
endif

# make bench-python: the binding against a plain call and redis-py
# (bindings/python/bench.py): each figure the median of
# CARMY_BENCH_PYTHON_ROUNDS rounds of about CARMY_BENCH_PYTHON_SECONDS,
# then the ratios against issue 20's goals; printed, never asserted.
EXTRA_DIST += bindings/python/bench.py
CARMY_BENCH_PYTHON_SECONDS = 0.5
CARMY_BENCH_PYTHON_ROUNDS = 5
if HAVE_PYTHON
bench-python: all
	stage=`mktemp -d` && mkdir $$stage/carmy && \
	cp $(srcdir)/bindings/python/carmy/*.py \
		bindings/python/carmy/.libs/_carmy.so $$stage/carmy/ && \
	cp $(srcdir)/bindings/python/bench.py $$stage/ && \
	CARMY_BENCH_ROUNDS=$(CARMY_BENCH_PYTHON_ROUNDS) \
	PYTHONPATH=$$stage $(PYTHON) $$stage/bench.py \
		$(abs_top_builddir)/daemon/carmyd $(CARMY_BENCH_PYTHON_SECONDS); \
	rc=$$?; rm -rf $$stage; exit $$rc
else
bench-python:
	@echo "make bench-python: no Python headers (configure found none)"; exit 1
endif
.PHONY: bench-python
