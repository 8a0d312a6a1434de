"""The extension's msgpack (carmy._pack) writes what msgpack.packb()
writes: the same call packs to the same bytes whichever packs it."""
import random

import msgpack
import pytest

import carmy

EDGES = [
    None, True, False, 0, 1, 127, 128, 255, 256, 65535, 65536,
    2 ** 32 - 1, 2 ** 32, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1,
    -1, -32, -33, -128, -129, -32768, -32769, -2 ** 31, -2 ** 31 - 1,
    -2 ** 63, 0.0, -0.0, 1.5, 1e300, float("inf"), "", "a" * 31, "a" * 32,
    "é" * 200, "x" * 255, "x" * 256, "x" * 65535, "x" * 65536, "日本",
    b"", b"\0" * 255, b"\0" * 256, b"\xff" * 65536, [], (), [1] * 15,
    [1] * 16, (2,) * 65536, {}, {str(i): i for i in range(15)},
    {str(i): i for i in range(16)}, {i: [i] for i in range(70000)},
    {"nested": [{"a": (1, 2.5, None)}, [b"x", {"b": {}}]]},
    {1: "int key", None: "none key", (1, 2): "tuple key"},
]


def test_edges_pack_as_msgpack_does():
    for v in EDGES:
        assert carmy._pack(v) == msgpack.packb(v), repr(v)[:80]


def _random_value(rng, depth=0):
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randrange(-2 ** 63, 2 ** 64)
    if kind == 2:
        return rng.choice([rng.randrange(-300, 300), rng.random() * 1e6])
    if kind == 3:
        return "".join(chr(rng.randrange(1, 0x3000))
                       for _ in range(rng.randrange(0, 40)))
    if kind == 4:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
    if kind == 5:
        return rng.randrange(-40, 300)
    n = rng.randrange(0, 20)
    if kind == 6:
        return [_random_value(rng, depth + 1) for _ in range(n)]
    if kind == 7:
        return tuple(_random_value(rng, depth + 1) for _ in range(n))
    return {_random_value(rng, 9) if rng.random() < 0.2 else
            "k%d" % i: _random_value(rng, depth + 1) for i in range(n)}


def test_random_values_pack_as_msgpack_does():
    rng = random.Random(20)
    for _ in range(3000):
        v = _random_value(rng)
        assert carmy._pack(v) == msgpack.packb(v), repr(v)[:200]


class Dict(dict):
    pass


class Int(int):
    pass


def test_other_values_go_to_msgpack():
    # Packed by msgpack.packb(), as before: subclasses, out of range.
    for v in (Dict(a=1), [Dict(b=2)], Int(5), {"n": Int(2 ** 40)}):
        assert carmy._pack(v) == msgpack.packb(v)
    for bad in (2 ** 64, -2 ** 63 - 1, [2 ** 70]):
        with pytest.raises(OverflowError):
            carmy._pack(bad)
    for bad in ({1, 2}, object(), {"a": [object()]}):
        with pytest.raises(TypeError):
            carmy._pack(bad)
    with pytest.raises(UnicodeEncodeError):
        carmy._pack("\ud800")
    deep = []
    for _ in range(600):
        deep = [deep]
    with pytest.raises(ValueError):
        carmy._pack(deep)
