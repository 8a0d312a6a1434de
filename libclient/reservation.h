/*
 * reservation.h - what libcarmy keeps in a struct carmy_reservation's
 * reserved words: the entry a live reservation holds in the segment, and
 * the owner id it was made under (0: not a live reservation). For
 * client.c, and for tests that act on an entry a client holds.
 *
 * Callers allocate the struct (on the stack, by value), so its size and
 * alignment are part of the ABI: two 8-byte words, the entry in the first
 * (as a uint32_t), the owner in the second.
 */
#ifndef CARMY_LIBCLIENT_RESERVATION_H
#define CARMY_LIBCLIENT_RESERVATION_H

#include <stddef.h>
#include <stdint.h>

#include "carmy.h"

_Static_assert(sizeof(((struct carmy_reservation *)0)->reserved) == 16,
	       "two reserved words: entry, owner");
_Static_assert(offsetof(struct carmy_reservation, reserved) ==
		       offsetof(struct carmy_reservation, result_len) +
			       sizeof(size_t),
	       "the reserved words follow result_len");
_Static_assert(sizeof(struct carmy_reservation) ==
		       offsetof(struct carmy_reservation, reserved) + 16,
	       "nothing after the reserved words");

static inline uint32_t resv_entry(const struct carmy_reservation *r)
{
	return (uint32_t)r->reserved[0];
}

static inline uint64_t resv_owner(const struct carmy_reservation *r)
{
	return r->reserved[1];
}

static inline void resv_set(struct carmy_reservation *r, uint32_t entry,
			    uint64_t owner)
{
	r->reserved[0] = entry;
	r->reserved[1] = owner;
}

/* No longer ours to complete or release. */
static inline void resv_done(struct carmy_reservation *r)
{
	r->reserved[1] = 0;
}

#endif /* CARMY_LIBCLIENT_RESERVATION_H */
