/*
 * hugepage.h - how much of a mapping of this process the kernel maps with
 * huge pages (one page-table entry a 2 MiB page, not 512 of 4 KiB).
 */
#ifndef CARMY_COMMON_HUGEPAGE_H
#define CARMY_COMMON_HUGEPAGE_H

#include <stdint.h>

/*
 * The bytes of the shared-memory mapping that starts at start which this
 * process maps with huge pages now (the ShmemPmdMapped of its entry in
 * /proc/self/smaps), or -1 if that cannot be read (no /proc, no such
 * mapping). Reads the whole of smaps: for start-up and reports, not for a
 * fast path.
 */
int64_t hugepage_mapped(const void *start);

#endif
