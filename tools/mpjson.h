/*
 * mpjson.h - a call's arguments, msgpack, shown as JSON to an operator.
 */
#ifndef TOOLS_MPJSON_H
#define TOOLS_MPJSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MPJSON_WHOLE 1		/* the JSON of one whole object */
#define MPJSON_PREFIX 0		/* what parsed of a cut one, then "…" */
#define MPJSON_NOT (-1)		/* not msgpack: nothing written */

#define MPJSON_BUDGET 4096	/* bytes of JSON written at most, before "…" */

/*
 * Write the first len bytes of a msgpack object of whole bytes in all (a
 * segment keeps only the first SHM_ARGS_KEEP) to f as JSON. nil, booleans,
 * integers, floats, strings, arrays and maps are themselves (keys that are
 * not strings are written as strings of their JSON, and keys that are not
 * strings inside those as strings of their msgpack's hex; a float JSON cannot
 * hold as the string "NaN", "Infinity" or "-Infinity"); binary as
 * {"bin":"HEX"}, an extension as {"ext":TYPE,"hex":"HEX"}. Strings go
 * through json_put_bytes(): the result is valid JSON whatever the bytes.
 *
 * Returns MPJSON_WHOLE when len == whole and the bytes are exactly one
 * object; MPJSON_PREFIX when len < whole and the bytes begin one: what
 * parses is written, the containers still open left so, and "…" (U+2026)
 * after it; MPJSON_PREFIX too when the JSON would pass MPJSON_BUDGET
 * bytes: its first MPJSON_BUDGET bytes at most (no UTF-8 sequence cut),
 * then "…"; MPJSON_NOT for anything else (bytes no msgpack encoder
 * writes, nesting past 64, bytes after the object), having written
 * nothing. Errors of f are left in its error indicator.
 */
int mpjson_put(FILE *f, const void *buf, size_t len, uint64_t whole);

#endif /* TOOLS_MPJSON_H */
