/*
 * json.h - the little JSON the tools print: strings from arbitrary bytes.
 * Objects are few and flat, so callers write the punctuation themselves.
 */
#ifndef TOOLS_JSON_H
#define TOOLS_JSON_H

#include <stddef.h>
#include <stdio.h>

/*
 * Write len bytes at buf to f as one JSON string, quotes included. '"' and
 * '\\' are escaped, control characters become \u00XX, valid UTF-8 passes
 * through, and every byte that is not part of a valid UTF-8 sequence
 * becomes \ufffd, so the output is valid JSON whatever the bytes are.
 * Errors are left in f's error indicator for the caller's final check.
 */
void json_put_bytes(FILE *f, const void *buf, size_t len);

/* What json_put_bytes() writes between the quotes. */
void json_put_chars(FILE *f, const void *buf, size_t len);

/* json_put_bytes() for a NUL-terminated string. */
void json_put_str(FILE *f, const char *s);

/* Length of the well-formed UTF-8 sequence starting at buf (whose first
 * byte is >= 0x80, n bytes readable), or 0 if there is none. */
size_t json_utf8_len(const void *buf, size_t n);

#endif /* TOOLS_JSON_H */
