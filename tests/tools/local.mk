# tests/tools
