# tests/systemd: the units (systemd-analyze verify), socket activation
# (systemd-socket-activate) and the readiness protocol, with real carmyd,
# carmy-gateway and clients.
TESTS += tests/systemd/systemd.test
dist_check_SCRIPTS += tests/systemd/systemd.test
