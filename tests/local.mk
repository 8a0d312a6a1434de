# tests/: one Check program per module, plus end-to-end tests against a real
# carmyd. Long soaks and benchmarks are separate targets.
