# gateway/: carmy-gateway, the HTTP front end (libmicrohttpd, jansson,
# libcurl).
# It runs command tools under tools/supervise.c's watcher, as carmy-run
# does, so it sits above tools/ in the layering.
bin_PROGRAMS += gateway/carmy-gateway
gateway_carmy_gateway_SOURCES = gateway/gateway.h gateway/main.c \
	gateway/config.c gateway/handle.c gateway/http.c gateway/execute.c \
	gateway/answer.c gateway/record.c gateway/command.c gateway/upstream.c \
	gateway/metrics.c \
	tools/supervise.h tools/supervise.c tools/json.h tools/json.c
gateway_carmy_gateway_CFLAGS = $(AM_CFLAGS) $(MHD_CFLAGS) $(JANSSON_CFLAGS) \
	$(CURL_CFLAGS) $(MSGPACK_CFLAGS) -pthread
gateway_carmy_gateway_LDADD = libclient/libcarmy.la common/liblog.la \
	common/libcommon.la $(MHD_LIBS) $(JANSSON_LIBS) $(CURL_LIBS) \
	$(MSGPACK_LIBS) -lpthread

# make bench-http: the gateway against a bare libmicrohttpd server (the
# floor) and Express 5 + express-idempotency, with wrk; see
# gateway/bench_http.sh. Not part of make check: figures are quoted, never
# asserted.
noinst_PROGRAMS += gateway/bench-http-floor
gateway_bench_http_floor_SOURCES = gateway/http_floor.c
gateway_bench_http_floor_CFLAGS = $(AM_CFLAGS) $(MHD_CFLAGS) -pthread
gateway_bench_http_floor_LDADD = $(MHD_LIBS) -lpthread
EXTRA_DIST += gateway/bench_http.sh gateway/bench_express.js
CARMY_BENCH_HTTP_SECONDS = 10

bench-http: all
	bash $(top_srcdir)/gateway/bench_http.sh $(abs_top_builddir) \
		$(abs_top_srcdir) $(CARMY_BENCH_HTTP_SECONDS)
.PHONY: bench-http
