/*
 * runfmt.c - the "exit code + output" result format (see runfmt.h).
 */
#include <errno.h>

#include "carmy.h"
#include "common/runfmt.h"

void runfmt_put_head(uint8_t head[RUNFMT_HEAD], int exit_code)
{
	uint32_t v = (uint32_t)exit_code;

	head[0] = (uint8_t)(v >> 24);
	head[1] = (uint8_t)(v >> 16);
	head[2] = (uint8_t)(v >> 8);
	head[3] = (uint8_t)v;
}

int runfmt_read(const void *result, size_t len, int *code,
		const uint8_t **out, size_t *out_len)
{
	const uint8_t *p = result;
	uint32_t v;

	if (len < RUNFMT_HEAD || p == NULL)
		return -EINVAL;
	v = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	    (uint32_t)p[2] << 8 | p[3];
	if (v > RUNFMT_EXIT_MAX)
		return -EINVAL;
	if (code != NULL)
		*code = (int)v;
	if (out != NULL)
		*out = p + RUNFMT_HEAD;
	if (out_len != NULL)
		*out_len = len - RUNFMT_HEAD;
	return 0;
}

bool runfmt_readable(int format, const void *result, size_t len)
{
	if (format != CARMY_FORMAT_EXIT_OUTPUT)
		return true;
	return runfmt_read(result, len, NULL, NULL, NULL) == 0;
}
