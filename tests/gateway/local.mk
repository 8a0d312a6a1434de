# tests/gateway: carmy-gateway end to end, with curl, against a real carmyd.
TESTS += tests/gateway/gateway.test
dist_check_SCRIPTS += tests/gateway/gateway.test

# The request-to-call conversion, fuzzed in one process (no carmyd).
check_PROGRAMS += tests/gateway/check_request
TESTS += tests/gateway/check_request
tests_gateway_check_request_SOURCES = tests/gateway/check_request.c \
	gateway/gateway.h gateway/config.c gateway/handle.c \
	gateway/execute.c gateway/run.c gateway/answer.c gateway/record.c \
	gateway/command.c gateway/upstream.c \
	tools/supervise.h tools/supervise.c tools/json.h tools/json.c
tests_gateway_check_request_CFLAGS = $(TEST_CFLAGS) $(MHD_CFLAGS) \
	$(JANSSON_CFLAGS) $(CURL_CFLAGS) -pthread
tests_gateway_check_request_LDADD = libclient/libcarmy.la common/liblog.la \
	common/libcommon.la $(CHECK_LIBS) $(MHD_LIBS) $(JANSSON_LIBS) \
	$(CURL_LIBS) $(MSGPACK_LIBS) -lpthread
