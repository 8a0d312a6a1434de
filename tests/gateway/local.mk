# tests/gateway: carmy-gateway end to end, with curl, against a real carmyd.
TESTS += tests/gateway/gateway.test
dist_check_SCRIPTS += tests/gateway/gateway.test
