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

/*
 * text_put_bytes() in at most max columns (0: no bound), without padding:
 * what does not fit is left out, and "…" (one column) ends what does.
 * Returns the columns written.
 */
size_t text_put_clipped(FILE *f, const void *buf, size_t len, size_t max);

/*
 * JSON text (mpjson_put()'s) for a person, in at most max columns as
 * text_put_clipped(): as it is, but that what would not show plainly (C0
 * and C1 controls, bytes of no valid UTF-8 sequence, the code points
 * text_put_bytes() escapes) is written as JSON's \uXXXX, so the text is
 * still the same JSON. Returns the columns written.
 */
size_t text_put_json(FILE *f, const void *buf, size_t len, size_t max);

/*
 * len bytes at buf as one JSON string, quotes included, of the value
 * json_put_bytes() gives them, but that the code points text_put_bytes()
 * escapes (C1 controls, the invisible and direction-changing ones) are
 * written as \uXXXX too: valid JSON that shows plainly on a terminal.
 */
void text_put_json_bytes(FILE *f, const void *buf, size_t len);

#endif /* TOOLS_TEXT_H */
