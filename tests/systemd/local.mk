# tests/systemd: the units (systemd-analyze verify, and security --offline
# for each service's exposure), socket activation
# (systemd-socket-activate) and the readiness protocol, with real carmyd,
# carmy-gateway and clients.
TESTS += tests/systemd/systemd.test
dist_check_SCRIPTS += tests/systemd/systemd.test
