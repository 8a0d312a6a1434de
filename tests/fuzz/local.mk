# tests/fuzz: libFuzzer targets (make fuzz)
