/*
 * hugepage.c - how much of a mapping the kernel maps with huge pages.
 */
#include "common/hugepage.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

int64_t hugepage_mapped(const void *start)
{
	const uintptr_t want = (uintptr_t)start;
	FILE *f = fopen("/proc/self/smaps", "re");
	char *line = NULL;
	size_t cap = 0;
	bool in = false;
	int64_t bytes = -1;

	if (f == NULL)
		return -1;
	/* An entry is its header line (lo-hi perms offset dev inode path)
	 * and then "Name: value" lines. A field's name is never two hex
	 * numbers joined by '-', so only headers read as a range. */
	while (getline(&line, &cap, f) > 0) {
		uintptr_t lo, hi;
		unsigned long long kb;

		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2) {
			if (in)
				break;		/* its entry had no such field */
			in = lo == want;
		} else if (in &&
			   sscanf(line, "ShmemPmdMapped: %llu kB", &kb) == 1) {
			bytes = (int64_t)(kb << 10);
			break;
		}
	}
	free(line);
	fclose(f);
	return bytes;
}
