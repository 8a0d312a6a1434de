#!/usr/bin/env python3
"""
layering.py - check that Carmy's files call each other in one direction.

Reads the global symbols every production object of a build defines and
uses (nm), and draws an edge from a source file to each other file whose
functions or data it uses. Fails, naming the files, when

  - two or more files call each other in a circle, or
  - a folder uses one that sits above it in the layering below
    (a folder may use its own files and those listed before it).

Usage: layering.py BUILDDIR [SRCDIR]   (after make; tests/layering.test runs it)
An object whose source is no longer in SRCDIR (a stale one) is left out.
"""
import os
import subprocess
import sys

# Lowest first. A folder may use itself and the folders before it.
LAYERS = [
    ["common"],
    ["shm"],
    ["libclient"],
    ["stores", "stores/journal", "stores/pg"],
    ["daemon"],
    ["tools", "bench", "examples"],
    ["gateway", "bindings", "bindings/python", "bindings/python/carmy"],
]
RANK = {d: i for i, layer in enumerate(LAYERS) for d in layer}


def objects(builddir, srcdir):
    """(source, object path): one object per source file, tests left out."""
    seen = {}
    for root, dirs, files in os.walk(builddir):
        rel = os.path.relpath(root, builddir)
        dirs[:] = [d for d in dirs if not (rel == "." and d in ("tests", "_ci"))]
        folder = rel[:-len("/.libs")] if rel.endswith("/.libs") else rel
        if folder == "." or folder.split("/")[0] not in {d.split("/")[0] for d in RANK}:
            continue
        for f in files:
            if not f.endswith(".o") or "-" not in f:
                continue
            target, src = f.split("-", 1)
            if target.startswith("tests_"):
                continue
            source = folder + "/" + src[:-2] + ".c"
            if not os.path.exists(os.path.join(srcdir, source)):
                continue
            seen.setdefault(source, os.path.join(root, f))
    return seen


def symbols(obj):
    out = subprocess.run(["nm", "--format=posix", obj], check=True,
                         capture_output=True, text=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            used.add(name)
        elif kind in "TDBRVWG":
            defined.add(name)
    return defined, used


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.strip())
    srcdir = sys.argv[2] if len(sys.argv) == 3 else \
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    objs = objects(sys.argv[1], srcdir)
    if not objs:
        sys.exit("layering: no objects under %s: run make first" % sys.argv[1])
    where, uses = {}, {}
    for src, obj in sorted(objs.items()):
        defined, used = symbols(obj)
        uses[src] = used
        for s in defined:
            where.setdefault(s, set()).add(src)
    edges = {src: set() for src in objs}
    for src, used in uses.items():
        for s in used:
            for dst in where.get(s, ()):
                if dst != src:
                    edges[src].add((dst, s))
    bad = 0
    for src in sorted(edges):
        for dst, s in sorted(edges[src]):
            a, b = RANK[os.path.dirname(src)], RANK[os.path.dirname(dst)]
            if b > a:
                print("layering: %s uses %s of %s, a folder above it" % (src, s, dst))
                bad += 1
    # Circles: strongly connected components of more than one file (Tarjan).
    graph = {s: {d for d, _ in e} for s, e in edges.items()}
    index, low, stack, on, comps, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    for comp in comps:
        print("layering: these files call each other in a circle:")
        for src in comp:
            for dst, s in sorted(edges[src]):
                if dst in comp:
                    print("  %s -> %s (%s)" % (src, dst, s))
        bad += 1
    if bad:
        sys.exit(1)
    print("layering: %d files, %d uses between files, one way" %
          (len(graph), sum(len(g) for g in graph.values())))


if __name__ == "__main__":
    main()
