/*
 * text.h - arbitrary bytes shown to a person on a terminal.
 */
#ifndef TOOLS_TEXT_H
#define TOOLS_TEXT_H

#include <stddef.h>
#include <stdio.h>

/*
 * Write len bytes at buf to f so that they cannot pass for anything else:
 * printable ASCII and valid UTF-8 as they are, '\\' doubled, and every
 * other byte (control characters, NUL, bytes of no valid UTF-8 sequence,
 * C1 controls, and the invisible or direction-changing code points that
 * can make one row read as another) as \xNN. Then spaces up to width
 * columns (each code point counted as one). Returns the columns written
 * before the padding.
 */
size_t text_put_bytes(FILE *f, const void *buf, size_t len, size_t width);

#endif /* TOOLS_TEXT_H */
