/*
 * bench_floor.h - the floors carmy-bench quotes its figures against,
 * measured on this machine in the same run with no carmyd involved:
 *
 *   cas-insert   hash a key (XXH3, 8 bytes), linear-probe a power-of-two
 *                array of uint64_t in shared memory to the first zero word
 *                and uatomic_cmpxchg() the key into it; the array has as
 *                many words as carmyd's index has buckets (when that is
 *                more than twice the keys), so that both pay the same
 *                cache and TLB misses for a random bucket
 *   lookup       the same probe, reading until the key is found
 *   msgpack-rt   pack a ~150-byte msgpack message, write it to a Unix
 *                socket, block until a single-threaded epoll server's small
 *                msgpack reply is read and unpacked
 */
#ifndef CARMY_BENCH_FLOOR_H
#define CARMY_BENCH_FLOOR_H

#include <stdint.h>
#include <sys/types.h>

#include "bench/bench_run.h"

/* The CAS table: mapped MAP_SHARED | MAP_ANONYMOUS before the workers fork,
 * so that they all probe the same words. */
struct floor_table {
	uint64_t *words;
	uint64_t mask;		/* words - 1 */
	size_t bytes;
	uint32_t lookup_keys;	/* keys floor_table_fill() put in */
};

/* The echo server: a child process serving a socket in a private temp
 * directory until the parent closes stop_fd. */
struct floor_echo {
	char dir[64];
	char path[128];
	pid_t pid;
	int stop_fd;
};

/* A table of at least 2 x keys and at least min_words words (a power of
 * two), all zero and faulted in. Returns 0 or -errno. */
int floor_table_new(struct floor_table *t, uint64_t keys, uint64_t min_words);
/* Insert the n keys the lookup figure looks for. Returns 0, or -ENOSPC. */
int floor_table_fill(struct floor_table *t, uint32_t n);
void floor_table_free(struct floor_table *t);

void floor_insert_figure(struct bench_figure *f, struct floor_table *t);
void floor_lookup_figure(struct bench_figure *f, struct floor_table *t);

/* Start the echo server, pinned to CPU cpu unless cpu < 0. Returns 0 or
 * -errno. */
int floor_echo_start(struct floor_echo *e, int cpu);
void floor_echo_stop(struct floor_echo *e);
void floor_rt_figure(struct bench_figure *f, struct floor_echo *e);

#endif /* CARMY_BENCH_FLOOR_H */
