# gateway/: carmy-gateway, the HTTP front end (libmicrohttpd, jansson,
# libcurl).
# It runs command tools under tools/supervise.c's watcher, as carmy-run
# does, so it sits above tools/ in the layering.
bin_PROGRAMS += gateway/carmy-gateway
gateway_carmy_gateway_SOURCES = gateway/gateway.h gateway/main.c \
	gateway/config.c gateway/handle.c gateway/http.c gateway/execute.c \
	gateway/run.c gateway/answer.c gateway/record.c gateway/command.c \
	gateway/upstream.c gateway/metrics.c gateway/flight.c \
	tools/supervise.h tools/supervise.c tools/json.h tools/json.c
gateway_carmy_gateway_CFLAGS = $(AM_CFLAGS) $(MHD_CFLAGS) $(JANSSON_CFLAGS) \
	$(CURL_CFLAGS) $(MSGPACK_CFLAGS) -pthread
gateway_carmy_gateway_LDADD = libclient/libcarmy.la common/liblog.la \
	common/libcommon.la $(MHD_LIBS) $(JANSSON_LIBS) $(CURL_LIBS) \
	$(MSGPACK_LIBS) -lpthread

