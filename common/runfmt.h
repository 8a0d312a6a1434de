/*
 * runfmt.h - the "exit code + output" result format (CARMY_FORMAT_EXIT_OUTPUT
 * in carmy.h): the exit code as 4 bytes, big-endian, then the command's
 * standard output. carmy-run records its results in it and reads them back,
 * carmyctl builds one for an operator's resolve, and carmyd refuses a
 * resolve whose result is not one: one definition for all three.
 */
#ifndef CARMY_COMMON_RUNFMT_H
#define CARMY_COMMON_RUNFMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RUNFMT_HEAD 4		/* bytes of the exit code */
#define RUNFMT_EXIT_MAX 255	/* the largest exit code carmy-run gives */

/* Write exit_code (0..RUNFMT_EXIT_MAX) as the RUNFMT_HEAD bytes at head. */
void runfmt_put_head(uint8_t head[RUNFMT_HEAD], int exit_code);

/*
 * Is result (len bytes) in the format: at least RUNFMT_HEAD bytes, whose
 * exit code is 0..RUNFMT_EXIT_MAX? If so, 0, with the exit code in *code
 * and the output in *out and *out_len (pointing into result; any of the
 * three may be NULL). Otherwise -EINVAL, and nothing written.
 */
int runfmt_read(const void *result, size_t len, int *code,
		const uint8_t **out, size_t *out_len);

/*
 * Can a client that records results in format (a CARMY_FORMAT_* value)
 * read result (len bytes)? Opaque bytes always; an exit code and output
 * only as runfmt_read() accepts them. A format no build defines reads as
 * opaque bytes: nothing is known of what its client reads.
 */
bool runfmt_readable(int format, const void *result, size_t len);

#endif
