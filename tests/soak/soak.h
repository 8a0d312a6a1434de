/*
 * soak.h - the chaos soak: worker processes make random calls through
 * libcarmy over a small identity space while a driver kills them (and, in
 * carmyd mode, carmyd) with SIGKILL at random moments; a checker then
 * proves from the logs they left that no identity ran twice and that every
 * answer Carmy gave was one it was allowed to give.
 *
 * The logs are the evidence, so they are written the way a crash cannot
 * falsify them: one write() per line, O_APPEND, nothing buffered in the
 * process (a SIGKILL loses nothing already written), one answer file per
 * worker incarnation (a line torn by a kill can only be the last of its
 * file). Times are CLOCK_MONOTONIC, comparable across processes.
 *
 * Answer file lines (a<incarnation>.log), after a first line "I inst"
 * naming the carmyd (0 or 1) the incarnation calls through:
 *   b t0 id var                     about to call carmy_begin
 *   B t0 t1 id var rc state exec status code len hash
 *                                   what carmy_begin answered
 *   L t id exec                     about to release (the tool did not run)
 *   l t id exec rc                  carmy_release returned rc
 *   A t id exec                     the tool ran, about to call carmy_complete
 *   C t0 t1 id exec rc              carmy_complete returned rc
 *   D t                             closed the handle on purpose
 * The effect log (effects.log), written by the "tool" itself:
 *   E t id var exec seed status len incarnation
 * The final pass (final.log through carmyd 0, final1.log through carmyd 1
 * when there are two), one line per identity and variant:
 *   F id var rc state exec status code len hash
 * after a line for each time it asked (again while a dead owner's entry
 * still showed running, or the store failed):
 *   Q t id var rc state exec        carmy_begin returned rc at t
 */
#ifndef CARMY_TESTS_SOAK_H
#define CARMY_TESTS_SOAK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "carmy.h"

/* Variants of one identity's arguments: same identity, other fingerprint. */
#define SOAK_VARIANTS 3

/* Where a worker is, published in shared memory for the driver to aim its
 * kills and to learn, after reaping, where the victim died. */
enum soak_phase {
	SOAK_P_CONNECT,		/* carmy_connect (also reconnecting) */
	SOAK_P_IDLE,		/* between calls, logging */
	SOAK_P_BEGIN,		/* inside carmy_begin */
	SOAK_P_RESERVED,	/* reserved, the tool has not run yet */
	SOAK_P_TOOL,		/* the tool runs (its effect is written first) */
	SOAK_P_AFTER_TOOL,	/* the tool ran, complete not called yet */
	SOAK_P_COMPLETE,	/* inside carmy_complete */
	SOAK_P_ACKED,		/* complete returned, logging */
	SOAK_P_RELEASE,		/* giving the reservation back */
	SOAK_P_ABANDON,		/* giving the call up as uncertain */
	SOAK_P_COUNT
};

extern const char *const soak_phase_names[SOAK_P_COUNT];

/* One worker slot, in a MAP_SHARED page the driver and the workers share. */
struct soak_slot {
	int ss_phase;		/* enum soak_phase, written by the worker */
	unsigned ss_inc;	/* incarnation running in this slot */
	unsigned ss_inst;	/* the carmyd it calls through */
};

/* How many carmyds one soak can run (--pg: two on one database). */
#define SOAK_MAX_INST 2

/* What every process of one soak needs to know. */
struct soak_cfg {
	const char *dir;	/* logs go here */
	const char *socket[SOAK_MAX_INST];
	unsigned ninst;		/* carmyds (sockets) in use */
	/*
	 * The identity space slides: calls pick among the nids identities
	 * below *fresh (most often the newest few, so that workers race on
	 * them), and now and then take a new one by bumping *fresh, which
	 * lives in shared memory. Without it every identity would be
	 * finished within a second and the rest of the run would only
	 * replay. *fresh stops at max_ids, which carmyd's capacity covers.
	 */
	unsigned nids;
	unsigned max_ids;
	uint32_t *fresh;
	unsigned nworkers;
	size_t max_result;	/* carmyd's --max-result */
	unsigned capacity;	/* carmyd's --capacity */
	unsigned tool_us;	/* longest simulated tool run */
	unsigned think_us;	/* longest pause between two calls */
	uint64_t seed;
	bool carmyd_kills;	/* carmyd may vanish: fail-closed answers ok */
	bool store_faults;	/* the store may fail: STORE_FAILED ok */
	unsigned todo;		/* kinds (1u << soak_kind) known to be open */
};

/* ------------------------------------------------------------ calls.c */

/* The calls of the identity space: identity id (0..max_ids-1) with one of
 * SOAK_VARIANTS argument variants. One identity in ten carries a big
 * argument map, so that carmy_begin spends long enough fingerprinting for
 * kills to land inside it. The call points into s and stays valid until
 * the next soak_space_call on s (one process, one thread). */
struct soak_space;

struct soak_space *soak_space_new(void);
void soak_space_free(struct soak_space *s);
/* Calls made after this name principal (at most 23 bytes; "soak" until
 * set): each round on a shared database takes identities of its own. */
void soak_space_principal(struct soak_space *s, const char *principal);
void soak_space_call(struct soak_space *s, unsigned id, unsigned var,
		     struct carmy_call *out);

/* What a tool execution produced: everything follows from the seed, so
 * the checker can recompute the bytes a replay must return. */
struct soak_result {
	uint64_t seed;
	int status;		/* CARMY_STATUS_* */
	size_t len;		/* may exceed max_result on purpose */
};

/* What a replay of that execution must show. */
struct soak_expect {
	int status;
	int code;		/* 0 or CARMY_ERESULT_TOO_LARGE */
	size_t len;
	uint64_t hash;
};

void soak_result_pick(uint64_t *rng, size_t max_result, struct soak_result *r);
void soak_result_bytes(const struct soak_result *r, uint8_t *buf);
void soak_result_expect(const struct soak_result *r, size_t max_result,
			struct soak_expect *e);
uint64_t soak_hash(const void *p, size_t n);

/* splitmix64: small, good enough, and the same in every process. */
uint64_t soak_rand(uint64_t *state);
/* Uniform in [0, n), n > 0. */
uint64_t soak_below(uint64_t *state, uint64_t n);

/* Write one line (already formatted) with a single write(). */
void soak_write_line(int fd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------ worker.c */

/* Run one worker incarnation until killed. Never returns. */
void soak_worker(const struct soak_cfg *cfg, struct soak_space *sp,
		 struct soak_slot *slot, unsigned inc)
	__attribute__((noreturn));

/* ------------------------------------------------------------ verify.c */

/* With no worker left and carmyd running: ask every identity with every
 * variant through every carmyd, write final.log (final1.log for the
 * second), and release what that reserved anew. Waits (bounded) for
 * entries of dead owners to turn interrupted and for a store that failed
 * to answer again. Returns 0, or -1 if it could not connect or write. */
int soak_verify(const struct soak_cfg *cfg, struct soak_space *sp);

/* ------------------------------------------------------------ check.c */

/* The properties, each a TAP line. */
enum soak_prop {
	SOAK_ONCE,		/* no identity ran twice */
	SOAK_REPLAY,		/* replays return the one execution */
	SOAK_ACKED,		/* acknowledged completions replay afterwards */
	SOAK_UNCERTAIN,		/* dead owners' identities stay uncertain */
	SOAK_ANSWERS,		/* no answer outside the contract */
	SOAK_PROP_COUNT
};

extern const char *const soak_prop_names[SOAK_PROP_COUNT];

/*
 * What kind of failure a violation is, finer than its property, so that a
 * run can name each and tell known-open kinds (--todo) from new ones:
 *
 *   double     an identity ran twice, or was held twice (once)
 *   split      the two carmyds' final passes name different executions
 *              (or one none) for one identity, none of them acknowledged
 *              (once: the logs' "held twice" checks are not counted
 *              again for it)
 *   orphan     an entry no logged begin reserved, where begins of it
 *              answered STORE_FAILED: one of them left it behind (once)
 *   wrong      a replay not of the one execution (replay)
 *   lost       an acknowledged completion that its own carmyd later does
 *              not replay, during the run or in the final pass (acked)
 *   stale      one that the other carmyd does not replay in the final
 *              pass (acked)
 *   lagging    a begin through the other carmyd, after the ack, answered
 *              something else than the replay (acked)
 *   uncertain  a dead owner's identity not answered uncertain (uncertain)
 *   answers    any other answer outside the contract (answers)
 */
enum soak_kind {
	SOAK_K_DOUBLE,
	SOAK_K_SPLIT,
	SOAK_K_ORPHAN,
	SOAK_K_WRONG,
	SOAK_K_LOST,
	SOAK_K_STALE,
	SOAK_K_LAGGING,
	SOAK_K_UNCERTAIN,
	SOAK_K_ANSWERS,
	SOAK_KIND_COUNT
};

extern const char *const soak_kind_names[SOAK_KIND_COUNT];
extern const enum soak_prop soak_kind_prop[SOAK_KIND_COUNT];

/* Parse "stale,lagging" into a mask of (1u << kind); -1 on a bad name. */
int soak_kinds_parse(const char *list, unsigned *mask);

struct soak_figures {
	uint64_t calls, reserved, replays, conflicts, uncertain, capacity;
	uint64_t unavailable;	/* fail-closed answers while carmyd was away */
	uint64_t store_failed;	/* STORE_FAILED answers (begin, complete) */
	uint64_t effects, acked, releases, disconnects, abandons;
	uint64_t interrupted_final;
	uint64_t violations[SOAK_PROP_COUNT];
	uint64_t kinds[SOAK_KIND_COUNT];
};

/* Violations of kinds not in todo. */
uint64_t soak_hard_violations(const struct soak_figures *f, unsigned todo);

/* Read the logs in cfg->dir and check them, adding what was counted to f
 * (so that rounds add up). Prints the first violations of each property as
 * TAP comments. Returns 0 if the logs could be read. */
int soak_check(const struct soak_cfg *cfg, struct soak_figures *f);

#endif
