/*
 * shm.h - Carmy's shared segment: layout, sanity check and the lock-free
 * reservation table. Linked into both carmyd and libcarmy.
 *
 * The full picture (layout, state machines, memory ordering) is drawn in
 * docs/segment.md; the comments here say what each piece relies on.
 *
 * Layout (every offset is from the start of the segment; each process maps
 * it at its own address, so the segment stores offsets and indexes, never
 * pointers):
 *
 *   header     struct shm_header, 256 bytes
 *   stats      SHM_STATS_STRIPES x struct shm_stats   answers counted
 *   acks       SHM_ACK_SLOTS x struct shm_ack_slot   answers told, and
 *                                                    reservations posted
 *   bells      SHM_BELLS x struct shm_bell        which loops are awake
 *   tickets    capacity x uint64_t        who holds each entry
 *   buckets    nbuckets x uint64_t        the open-addressing index
 *   entries    capacity x struct shm_entry  identity, fingerprint, status
 *   calls      capacity x struct shm_call   what each entry's call was
 *   results    capacity x result_stride   each entry's result area
 *
 * Entries, their calls and their result areas are apart so that the part
 * every reserve and replay touches stays dense (four and a half entries per
 * page): a replay never reads a call, a reserve writes one line of it for
 * a small call.
 *
 * An entry is reserved in two steps. First a ticket (an entry record) is
 * taken with a CAS on its ticket word (FREE -> owner id) and filled in
 * privately. Then one CAS on a FREE bucket publishes it (FREE -> RUNNING,
 * naming the entry). Everything a reader needs is written before that CAS,
 * so no reader ever sees a half-built entry, and a claimer that dies before
 * publishing leaves only a ticket that carmyd gives back: never a stuck
 * bucket.
 */
#ifndef CARMY_SHM_H
#define CARMY_SHM_H

#include <linux/futex.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "carmy.h"

#define SHM_MAGIC UINT64_C(0x4745535952414d43)	/* "CARMYSEG" little-endian */
#define SHM_FORMAT 8
#define SHM_HEADER_SIZE 256
#define SHM_CAPACITY_MAX ((UINT32_C(1) << 24) - 1)	/* entry index is 24 bits */
#define SHM_MAX_RESULT_MAX (UINT32_C(64) << 20)
#define SHM_FP_LEN 16
#define SHM_EXEC_LEN 16
#define SHM_TOOL_KEEP 120	/* bytes of a call's tool name kept */
#define SHM_ARGS_KEEP 256	/* bytes of its arguments kept */

/*
 * Ticket words, 64 bits. One per entry; an entry is usable only while its
 * ticket says so. The low half says what; the high half is the pid of the
 * process that claimed the entry, so that carmyd can tell when a claimer
 * is really gone. Low values from SHM_OWNER_MIN up are owner ids (one per
 * client connection, assigned by carmyd, never reused within a segment's
 * life).
 *
 *   FREE --client CAS--> owner|pid --carmyd complete/sweep--> LIVE
 *     ^                    |   \--carmyd sweep--> SWEEPING --> LIVE
 *     |                    |                           \--> ORPHAN|pid
 *     +--client release----+                                    |
 *     +---------------- carmyd, once pid is gone ---------------+
 *
 * ORPHAN is an unpublished claim whose owner id carmyd has declared dead
 * (its connection closed, or carmyd restarted) while its process may still
 * be running, half way through filling the entry. Giving the entry to
 * someone else before that process is gone would let its late writes land
 * in the new claimer's entry; so carmyd frees it only when the pid has
 * exited.
 */
#define SHM_TICKET_FREE 0u
#define SHM_TICKET_LIVE 1u	/* published, completed or uncertain: no owner */
#define SHM_TICKET_SWEEPING 2u	/* carmyd is deciding about a dead owner's entry */
#define SHM_TICKET_ORPHAN 3u	/* dead owner's unpublished claim, pid may live */
#define SHM_OWNER_MIN 16u

#define SHM_T_WHAT(t) ((uint32_t)(t))
#define SHM_T_PID(t) ((uint32_t)((t) >> 32))

static inline uint64_t shm_ticket(uint32_t what, uint32_t pid)
{
	return ((uint64_t)pid << 32) | what;
}

/*
 * Bucket words, CAS'd as one 64-bit value:
 *
 *   63..61 state   60..48 version   47..24 tag   23..0 entry
 *
 * The version grows on every transition so that a CAS with a stale word
 * fails even if the state came back (ABA). The tag is 24 bits of the
 * identity hash: most non-matching buckets are skipped without touching
 * their entry.
 *
 *   FREE --client publish--> RUNNING --carmyd complete--> COMPLETED
 *                              |  \---carmyd sweep (dead owner)--> UNCERTAIN
 *                              +--client release--> TOMB
 *   TOMB --carmyd reclaim--> FREE      (only if no live probe crosses it,
 *                                       the cluster's end held BLOCKED)
 *   TOMB --carmyd compaction--> RUNNING | COMPLETED | UNCERTAIN  (a live
 *                                       entry moved to an earlier bucket of
 *                                       its probe; its old bucket turns TOMB)
 *
 * COMPLETED and UNCERTAIN are final: nothing in the table ever evicts them.
 * carmyd may move a live entry's bucket closer to home (the entry record
 * stays; en_bucket follows), so that the tombstones its probe would cross
 * can be reclaimed.
 */
enum shm_state {
	SHM_FREE = 0,
	SHM_RUNNING = 1,
	SHM_COMPLETED = 2,
	SHM_UNCERTAIN = 3,
	SHM_TOMB = 4,
	SHM_BLOCKED = 5,
};

#define SHM_W_STATE(w) ((unsigned)((w) >> 61))
#define SHM_W_VER(w) ((uint32_t)(((w) >> 48) & 0x1fff))
#define SHM_W_TAG(w) ((uint32_t)(((w) >> 24) & 0xffffff))
#define SHM_W_ENTRY(w) ((uint32_t)((w) & 0xffffff))

static inline uint64_t shm_word(unsigned state, uint32_t ver, uint32_t tag,
				uint32_t entry)
{
	return ((uint64_t)state << 61) | ((uint64_t)(ver & 0x1fff) << 48) |
	       ((uint64_t)(tag & 0xffffff) << 24) | (entry & 0xffffff);
}

/* The next word of a transition: new state, version bumped, tag and entry
 * kept (or cleared for FREE/TOMB/BLOCKED, which name no entry). */
static inline uint64_t shm_next(uint64_t w, unsigned state)
{
	if (state == SHM_FREE || state == SHM_TOMB || state == SHM_BLOCKED)
		return shm_word(state, SHM_W_VER(w) + 1, 0, 0);
	return shm_word(state, SHM_W_VER(w) + 1, SHM_W_TAG(w), SHM_W_ENTRY(w));
}

/* The segment header. Geometry fields are written once by carmyd at
 * creation; the sh_ fields below the line are carmyd's to update. */
struct shm_header {
	uint64_t sh_magic;
	uint64_t sh_layout;	/* shm_layout_signature() of the creator */
	uint64_t sh_size;	/* bytes in the segment */
	uint32_t sh_capacity;
	uint32_t sh_nbuckets;	/* power of two, >= 2 x capacity */
	uint32_t sh_max_result;
	uint32_t sh_result_stride;
	uint64_t sh_tickets_off;
	uint64_t sh_buckets_off;
	uint64_t sh_entries_off;
	uint64_t sh_results_off;
	uint64_t sh_seed;	/* identity hash seed, random per segment */
	uint64_t sh_created_ns;
	/* ---- carmyd's, updated while running ---- */
	uint32_t sh_epoch;	/* carmyd starts on this segment */
	uint32_t sh_owner_base;	/* owners below it belong to earlier epochs */
	uint32_t sh_next_owner;	/* next owner id to hand out */
	uint32_t sh_daemon_pid;
	/* ---- a hint, bumped by clients on release ---- */
	uint32_t sh_tombs;	/* tombstones made since carmyd's last reclaim */
	/* ---- odd while carmyd moves finished entries (a seqlock) ---- */
	uint32_t sh_move_seq;
	/* ---- carmyd's liveness word (see shm_daemon_alive) ---- */
	uint32_t sh_alive;
	/* ---- 1 once a carmyd has loaded all its store held into this
	 * segment, and which store that was (a number carmyd derives from
	 * it). 0 (a segment of an older build reads 0 too), or another
	 * store, makes the next carmyd load everything again, as into a new
	 * segment ---- */
	uint32_t sh_loaded;
	uint64_t sh_store;
	uint64_t sh_calls_off;	/* geometry, with the offsets above */
	/* ---- carmyd's --retain in ms, for operators (carmyctl status):
	 * SHM_RETAIN_NEVER, or 0 where a carmyd of an older build ran. Told,
	 * not used: no process acts on it, so it is not part of the layout
	 * signature ---- */
	uint64_t sh_retain_ms;
	/* ---- for operators too, told the same way: how many clients of
	 * the previous carmyd it still holds (their running calls stay
	 * theirs), and when --grace lets them go at the latest (ns since
	 * the Unix epoch; carmyd itself counts it on its monotonic clock);
	 * both 0 when it holds none ---- */
	uint32_t sh_held;
	uint32_t sh_pad;
	uint64_t sh_held_until_ns;
	uint8_t sh_reserved[SHM_HEADER_SIZE - 160];
};
#define SHM_RETAIN_NEVER UINT64_MAX

/*
 * Is carmyd alive? sh_alive is a robust futex word in the kernel's sense
 * (set_robust_list(2), the kernel's robust-futex ABI): from start to exit it
 * holds the thread id of a carmyd thread, the keeper, that registered the
 * word on its robust list. However that thread dies (kill -9, a crash, a
 * clean exit: carmyd never lets go while it runs), the kernel sets
 * FUTEX_OWNER_DIED in the word and clears the id, and carmyd's clean stop
 * writes FUTEX_OWNER_DIED itself: a fact read with one load, no system call
 * and no timer. Used before reserving, so that a client never starts a tool
 * that no carmyd could record. A client that writes over the word can make
 * carmyd look dead for at most a second: carmyd puts its keeper's id back
 * on its next check (shm_restore_alive).
 */
static inline bool shm_daemon_alive(const struct shm_header *h)
{
	uint32_t w = __atomic_load_n(&h->sh_alive, __ATOMIC_ACQUIRE);

	return (w & FUTEX_TID_MASK) != 0 && (w & FUTEX_OWNER_DIED) == 0;
}

/*
 * The process that keeps sh_alive (carmyd, or a test playing it): its
 * keeper thread, which does nothing but hold the word's robust-list
 * registration; the list itself lives on the keeper's stack, never in the
 * segment (each process maps it elsewhere). Private to that process.
 */
struct shm_alive {
	uint32_t *word;		/* &sh_alive in the holder's mapping */
	uint32_t tid;		/* the keeper's thread id: what the word holds */
	pthread_t thread;
	pthread_mutex_t mu;	/* guards state */
	pthread_cond_t cv;
	int state;		/* the keeper's: 0 starting, 1 holding, <0 -errno;
				 * ours: 2 let go */
};

/* One entry record: identity, fingerprint, execution id and, once
 * completed, the result's status and length (the bytes are in the entry's
 * result area). Filled by the reserving client before its bucket is
 * published; the result fields are written by carmyd before the bucket turns
 * COMPLETED. After that nothing writes it (short of a release before
 * completion, which frees it). */
struct shm_entry {
	uint32_t en_bucket;	/* the bucket it is published in */
	uint16_t en_len[3];	/* principal, session, request_id */
	uint8_t en_status;	/* CARMY_STATUS_* once completed */
	uint8_t en_pad;
	uint32_t en_result_len;
	int32_t en_result_code;	/* 0, or CARMY_ERESULT_TOO_LARGE */
	uint32_t en_pid;	/* of the reserving process, for operators */
	/* Not 0 while a durable store has not yet answered this
	 * reservation, or a shared store its release (a futex word: see
	 * shm_settle_pending): a call that finds it RUNNING waits to learn
	 * whether it stands before it names its execution id. In the
	 * entry's first line, which a reserve writes anyway. */
	uint32_t en_pending;
	uint8_t en_fingerprint[SHM_FP_LEN];
	uint8_t en_rawprint[SHM_FP_LEN];	/* of the bytes as first sent */
	uint8_t en_exec[SHM_EXEC_LEN];
	uint64_t en_started_ns;
	uint64_t en_finished_ns;
	/* Set when an operator resolved it (carmy_resolve): who and when. */
	uint64_t en_resolved_ns;
	uint32_t en_resolved_uid;
	uint32_t en_resolved_pid;
	uint8_t en_ident[3 * CARMY_ID_MAX];
} __attribute__((aligned(64)));

/*
 * What an entry's call was, for an operator deciding about it (carmyctl
 * list and show): its tool name and arguments as sent, cut to
 * SHM_TOOL_KEEP and SHM_ARGS_KEEP bytes, with their whole lengths, and
 * the format its client records results in (CARMY_FORMAT_*), which
 * carmyd holds an operator's resolve to. The kept bytes lie back to back
 * in cl_data, the tool's first: a small call fills one cache line. Filled
 * with the entry, before its bucket is published, and like it never
 * written again while the entry stands. Only the kept bytes are written:
 * what lies past them is an earlier call's, never read.
 */
struct shm_call {
	uint32_t cl_args_len;	/* whole length, UINT32_MAX: that or more */
	uint16_t cl_tool_len;	/* whole length, UINT16_MAX: that or more */
	uint8_t cl_format;	/* CARMY_FORMAT_*, or 255: not known */
	uint8_t cl_pad;
	uint8_t cl_data[SHM_TOOL_KEEP + SHM_ARGS_KEEP];
} __attribute__((aligned(64)));

/* How many bytes of the tool name and of the arguments cl keeps, from
 * its lengths (read once by the caller, into cl's private copy). */
static inline size_t shm_call_tool_kept(const struct shm_call *cl)
{
	return cl->cl_tool_len < SHM_TOOL_KEEP ? cl->cl_tool_len :
						 SHM_TOOL_KEEP;
}

static inline size_t shm_call_args_kept(const struct shm_call *cl)
{
	return cl->cl_args_len < SHM_ARGS_KEEP ? cl->cl_args_len :
						 SHM_ARGS_KEEP;
}

/* A call's summary on its way into an entry's struct shm_call: the first
 * tool_kept bytes of the tool name, of tool_len in all, and likewise for
 * the arguments; what is kept is cut to SHM_TOOL_KEEP / SHM_ARGS_KEEP
 * bytes (and to the whole lengths). */
struct shm_summary {
	const void *tool;
	size_t tool_kept;
	uint64_t tool_len;
	const void *args;
	size_t args_kept;
	uint64_t args_len;
	uint8_t format;
};

/*
 * What clients answered, counted for operators (carmyctl status, metrics).
 * Clients count in the segment, since reserves and replays never reach
 * carmyd; each handle adds to its own stripe (its owner id modulo the
 * stripes), one cache line each, so counting costs a store to a line of
 * its own rather than a line bouncing between CPUs (or a locked add: see
 * count() in client.c for what that trades). Readers sum the stripes.
 * Only ever added to; a scribbled stripe can only make the counts wrong.
 */
#define SHM_STATS_STRIPES 64
struct shm_stats {
	uint64_t st_reserves;
	uint64_t st_replays;
	uint64_t st_conflicts;
	uint64_t st_uncertain;
	uint64_t st_capacity;	/* refused: IDEMPOTENCY_CAPACITY */
	uint64_t st_pad[3];
} __attribute__((aligned(64)));

/*
 * Where carmyd tells a connection's client the answer to a RESERVE or
 * COMPLETE it sent (a futex word: see shm_ack). carmyd hands one slot to
 * each connection, for as long as it is open, so nothing else writes it
 * meanwhile; one past the last, a connection is answered on its socket
 * alone.
 */
#define SHM_ACK_SLOTS 1024
struct shm_ack_slot {
	uint32_t ak_word;	/* the answer (shm_ack) */
	/* A RESERVE posted here instead of sent (shm/post.c): gen << 2 |
	 * state, then the request, which its sum covers. (Completions go
	 * to carmyd on the socket, as msgpack, always.) */
	uint32_t ak_post;
	uint32_t ak_type;
	uint32_t ak_entry;
	uint8_t ak_exec[16];
	uint64_t ak_sum;
	uint32_t ak_pad[6];
} __attribute__((aligned(64)));

/*
 * Whether an event loop of carmyd is awake, and so looks at the slots of
 * its connections for posted requests (shm_post). One per loop, up to
 * SHM_BELLS; a connection of a loop past the last posts nothing.
 */
#define SHM_BELLS 64
struct shm_bell {
	uint32_t bl_awake;
	uint32_t bl_pad[15];
} __attribute__((aligned(64)));

/* Geometry derived from (capacity, max_result): the one place sizes and
 * offsets are computed, used to create a segment and to check one. */
struct shm_geometry {
	uint32_t capacity;
	uint32_t nbuckets;
	uint32_t max_result;
	uint32_t result_stride;
	uint64_t tickets_off;
	uint64_t buckets_off;
	uint64_t entries_off;
	uint64_t calls_off;
	uint64_t results_off;
	uint64_t size;
};

/* A process-local view of a mapped segment. The geometry is a validated
 * private copy: nothing in it is ever re-read from shared memory. */
struct shm_view {
	uint8_t *base;
	size_t mapped;
	struct shm_geometry geo;
	uint64_t seed;
	struct shm_stats *stats;
	struct shm_ack_slot *acks;
	struct shm_bell *bells;
	uint64_t *tickets;
	uint64_t *buckets;
	struct shm_entry *entries;
	struct shm_call *calls;
	uint8_t *results;
	uint32_t move_seq;	/* carmyd's own copy of sh_move_seq */
};

/* An identity ready for lookup: its three parts and its hash. */
struct shm_key {
	const uint8_t *part[3];
	uint16_t len[3];
	uint64_t hash;
};

/* What shm_reserve() found. */
enum shm_outcome {
	SHM_OUT_RESERVED,	/* entry/bucket are ours, RUNNING */
	SHM_OUT_FOUND,		/* an entry for this identity exists */
	SHM_OUT_FULL,		/* no free ticket: capacity reached */
	SHM_OUT_NOFREE,		/* tickets left, but tombstones fill the index */
	SHM_OUT_BUSY,		/* carmyd held a bucket BLOCKED for too long */
	SHM_OUT_DEAD,		/* carmyd swept our owner id: we are disconnected */
	SHM_OUT_NODAEMON,	/* no carmyd holds the segment: nothing reserved */
	SHM_OUT_NEED_FP,	/* claim.fp is needed: set it and call again */
};

struct shm_found {
	uint32_t entry;
	uint32_t bucket;
	uint64_t word;		/* the bucket word seen */
	unsigned state;		/* SHM_RUNNING / COMPLETED / UNCERTAIN */
	bool same_fp;
	/* en_pending said a durable store had yet to answer (or the entry
	 * was being given back) when the entry was seen as state: a RUNNING
	 * entry seen so is not to be named; look again once it ends. */
	bool pending;
	uint8_t exec[SHM_EXEC_LEN];
};

/* shm_claim.crowd: the flag and the count at which the cursor moves. */
#define SHM_CROWD_FREE_NEXT 0x80000000u
#define SHM_CROWD_MOVE 4u

/* What a new reservation carries into its entry. The execution id and the
 * start time are made only once the identity is known to be new, so a
 * replay never pays for them. */
struct shm_claim {
	uint32_t owner;
	uint32_t pid;
	/* The canonical fingerprint (SHM_FP_LEN bytes), and the raw print:
	 * the same hash over the bytes exactly as sent. A retry usually
	 * sends the very same bytes, and equal raw prints prove equal
	 * fingerprints, so fp may be left NULL until shm_reserve() says it
	 * is needed (SHM_OUT_NEED_FP): a new identity, or bytes that differ.
	 * rawfp may be NULL (it then never matches). */
	const uint8_t *fp;
	const uint8_t *rawfp;
	/* Write a fresh execution id and return the time in ns. */
	uint64_t (*make_exec)(void *arg, uint8_t exec[SHM_EXEC_LEN]);
	void *arg;
	uint32_t *cursor;	/* where this owner looks for a ticket next */
	/* Claims that found the ticket after the owner's last one taken
	 * since it was seen FREE, counted until a claim finds its ticket
	 * FREE, with SHM_CROWD_FREE_NEXT if the ticket after the last claim
	 * was FREE then: at SHM_CROWD_MOVE the cursor moves away
	 * (ticket_claim()). NULL: it never moves. Relaxed atomics. */
	uint32_t *crowd;
	bool pending;		/* a durable store must confirm it first */
	/* Never to wait long (carmy_try_begin()): a move or reclaim of
	 * carmyd's still going after SHM_BUSY_TURNS pauses (tens of
	 * microseconds) answers SHM_OUT_BUSY at once, not after
	 * SHM_BUSY_NS. */
	bool hasty;
	const struct shm_summary *call;	/* what the call is, for its
					 * struct shm_call; NULL: nothing */
};

/* An execution a durable store gave back, for shm_restore(); also the
 * result an operator gives an interrupted one, for shm_resolve(). */
struct shm_restored {
	const uint8_t *fp;
	const uint8_t *rawfp;
	const uint8_t *exec;
	uint32_t pid;
	uint64_t started_ns;
	bool completed;		/* else it becomes UNCERTAIN */
	uint64_t finished_ns;
	int status;
	int result_code;
	const void *result;
	size_t result_len;
	uint64_t resolved_ns;	/* 0: not resolved by an operator */
	uint32_t resolved_uid;
	uint32_t resolved_pid;
	struct shm_summary call;	/* shm_restore(): what the call was */
};

/* A recorded result, copied out of the segment by shm_read_result(). */
struct shm_result {
	int status;
	int result_code;
	uint8_t exec[SHM_EXEC_LEN];
	void *data;		/* malloc'd, NUL-terminated; caller frees */
	size_t len;
};

/* ---- segment.c: layout, format, sanity, mapping, carmyd's liveness ---- */
uint64_t shm_layout_signature(void);
int shm_geometry(uint32_t capacity, uint32_t max_result,
		 struct shm_geometry *geo);
void shm_format(void *base, const struct shm_geometry *geo, uint64_t seed,
		uint64_t now_ns);
int shm_sane(const void *base, size_t mapped, struct shm_geometry *geo);
int shm_view_init(struct shm_view *v, void *base, size_t mapped);
void *shm_mmap(int fd, size_t size, bool writable);
int shm_map(const char *name, bool writable, struct shm_view *v);
int shm_map_vetted(const char *name, bool writable,
		   int (*vet)(const struct stat *st, void *arg), void *arg,
		   struct shm_view *v);
void shm_unmap(struct shm_view *v);
int shm_hold_alive(struct shm_alive *a, const struct shm_view *v);
bool shm_restore_alive(const struct shm_alive *a, uint32_t *was);
void shm_let_go_alive(struct shm_alive *a);

/* ---- here, inline: the view's parts, and a prefetch ---- */
static inline struct shm_header *shm_header(const struct shm_view *v)
{
	return (struct shm_header *)v->base;
}

static inline struct shm_entry *shm_entry_at(const struct shm_view *v,
					     uint32_t e)
{
	return &v->entries[e];
}

static inline struct shm_call *shm_call_at(const struct shm_view *v,
					   uint32_t e)
{
	return &v->calls[e];
}

static inline uint8_t *shm_result_area(const struct shm_view *v, uint32_t e)
{
	return v->results + (size_t)e * v->geo.result_stride;
}

/*
 * The prefetches below are always inlined. Left out of line, a function
 * of __builtin_prefetch() calls that only loads fields of v is found pure
 * (GCC 12 at -O1, -O2 and -Os), and a call to a pure function whose result
 * is unused is deleted, hints and all (tests/shm/prefetch.test).
 */

/* Ask for k's home bucket ahead of the probe: a client hashes the identity,
 * then spends a few hundred nanoseconds fingerprinting the call, long enough
 * for the cache line to arrive. A hint only: it reads nothing. */
static inline __attribute__((always_inline)) void
shm_prefetch_home(const struct shm_view *v, const struct shm_key *k)
{
	__builtin_prefetch(&v->buckets[(uint32_t)k->hash &
				       (v->geo.nbuckets - 1)]);
}

/* Ask, for writing, for the lines a new reservation fills in entry e: the
 * entry's head and identity, its pending word, and its call's head. Never
 * touched since carmyd zeroed them, they are not in any cache, and the CAS
 * that publishes the entry waits for every store before it. A hint,
 * reading and writing nothing. */
static inline __attribute__((always_inline)) void
shm_prefetch_entry(const struct shm_view *v, uint32_t e)
{
	const struct shm_entry *en = shm_entry_at(v, e);

	__builtin_prefetch(en, 1);
	__builtin_prefetch((const uint8_t *)en + 64, 1);
	__builtin_prefetch((const uint8_t *)en + 128, 1);
	__builtin_prefetch(shm_call_at(v, e), 1);
}

/* The same for the entry an owner's cursor points at, the ticket it most
 * likely claims next. Like shm_prefetch_home, for a client to issue before
 * it fingerprints the call. */
static inline __attribute__((always_inline)) void
shm_prefetch_claim(const struct shm_view *v, const uint32_t *cursor)
{
	uint32_t e = __atomic_load_n(cursor, __ATOMIC_RELAXED);

	if (e < v->geo.capacity)
		shm_prefetch_entry(v, e);
}

/* ---- table.c: keys, reserve, look up, release, results, the ack slots
 * (clients and carmyd) ---- */
int shm_key_init(struct shm_key *k, uint64_t seed, const void *principal,
		 size_t plen, const void *session, size_t slen,
		 const void *request_id, size_t rlen);
enum shm_outcome shm_reserve(const struct shm_view *v, const struct shm_key *k,
			     const struct shm_claim *c, struct shm_found *out);
int shm_read_result(const struct shm_view *v, uint32_t entry, uint32_t bucket,
		    uint64_t word, struct shm_result *out);
int shm_release(const struct shm_view *v, uint32_t entry, uint32_t owner);
int shm_release_as(const struct shm_view *v, uint32_t entry, uint32_t owner,
		   const uint8_t *exec);
void shm_settle_pending(const struct shm_view *v, uint32_t entry,
			const uint8_t *exec);
void shm_withdraw_pending(const struct shm_view *v, uint32_t entry,
			  const uint8_t *exec);
bool shm_mark_pending(const struct shm_view *v, uint32_t entry,
		      const uint8_t *exec);
int shm_wait_pending(const struct shm_view *v, uint32_t entry,
		     const uint8_t *exec, int timeout_ms);
bool shm_owns(const struct shm_view *v, uint32_t entry, uint32_t owner,
	      uint32_t *bucket, uint64_t *word);
int shm_look_as(const struct shm_view *v, uint32_t e, const uint8_t *exec,
		int status, int result_code, const void *data, size_t len,
		bool *same);
int shm_restore(const struct shm_view *v, const struct shm_key *k,
		const struct shm_restored *r, uint32_t *cursor, bool insert);
bool shm_lookup(const struct shm_view *v, const struct shm_key *k,
		struct shm_found *out);
int shm_resolve(const struct shm_view *v, uint32_t e, const uint8_t *exec,
		const struct shm_restored *r);
bool shm_published_as(const struct shm_view *v, uint32_t e,
		      const uint8_t *exec);
void shm_call_fill(struct shm_call *cl, const struct shm_summary *s);
void shm_call_copy(const struct shm_view *v, uint32_t e,
		   struct shm_call *out);
/* shm_ack_wait(): where carmyd's answer is. */
#define SHM_ACK_DONE 0		/* the request succeeded: no reply follows */
#define SHM_ACK_SOCKET 1	/* the answer is a reply on the socket */
#define SHM_ACK_LOST 2		/* written over: the answer is not there */
bool shm_ack_expect(const struct shm_view *v, uint32_t slot, uint32_t *last,
		    const uint8_t *exec);
uint32_t shm_ack_mark(const struct shm_view *v, uint32_t slot, uint32_t gen);
int shm_ack_wait(const struct shm_view *v, uint32_t slot, uint32_t *last,
		 const uint8_t *exec, int timeout_ms);
/* shm_ack(): whether the answer was told in the slot. */
#define SHM_ACK_MISSED 0	/* not awaited there: answer on the socket */
#define SHM_ACK_TOLD 1
#define SHM_ACK_TOLD_ASLEEP 2	/* ... and shm_ack_wake() is owed */
int shm_ack(const struct shm_view *v, uint32_t slot, const uint8_t *exec,
	    bool done);
void shm_ack_wake(const struct shm_view *v, uint32_t slot);
bool shm_ack_awaits(const struct shm_view *v, uint32_t slot,
		    const uint8_t *exec);
int shm_ack_any(const struct shm_view *v, uint32_t slot);

/* ---- post.c: a request posted in an ack slot, and the bells ---- */
struct shm_post {
	uint32_t type;		/* WIRE_RESERVE (carmyd takes no other) */
	uint32_t entry;
	uint8_t exec[16];
};
#define SHM_POSTED 1		/* shm_post(): carmyd has it or will look */
#define SHM_WITHDRAWN 0		/* ... carmyd sleeps: send it instead */
int shm_post(const struct shm_view *v, uint32_t slot, uint32_t bell,
	     uint32_t gen, const struct shm_post *p);
int shm_post_take(const struct shm_view *v, uint32_t slot, uint32_t gen,
		  struct shm_post *out);
bool shm_post_ready(const struct shm_view *v, uint32_t slot, uint32_t gen);
void shm_post_reset(const struct shm_view *v, uint32_t slot, uint32_t gen);
bool shm_post_withdraw(const struct shm_view *v, uint32_t slot,
		       uint32_t gen);
void shm_bell_set(const struct shm_view *v, uint32_t bell, bool awake);

/* ---- sweep.c: carmyd's writes: results, purges, sweeps, reclaiming
 * tombstones, moves ---- */
struct shm_sweep_stats {
	uint32_t uncertain;	/* running entries turned uncertain */
	uint32_t freed;		/* unpublished claims given back */
	uint32_t given_back;	/* running, never confirmed: given back */
	uint32_t orphaned;	/* unpublished claims of processes still alive */
	uint32_t settled;	/* already final, ticket made LIVE */
};

/* What a sweep asks its caller: is this owner id dead, is this pid gone. */
struct shm_sweep_ops {
	bool (*owner_dead)(uint32_t owner, void *arg);
	bool (*pid_gone)(uint32_t pid, void *arg);
	void *arg;
};
int shm_record_result(const struct shm_view *v, uint32_t entry,
		      uint32_t owner, const uint8_t *exec, int status,
		      int result_code, const void *data, size_t len,
		      uint64_t now_ns);
bool shm_purge(const struct shm_view *v, uint32_t e, const uint8_t *exec);
int shm_abandon(const struct shm_view *v, uint32_t e, uint32_t owner,
		const uint8_t *exec);
bool shm_completed_before(const struct shm_view *v, uint32_t e,
			  uint64_t before_ns, uint8_t exec[SHM_EXEC_LEN]);
unsigned shm_state_as(const struct shm_view *v, uint32_t e,
		      const uint8_t *exec);
bool shm_completed_as(const struct shm_view *v, uint32_t entry,
		      const uint8_t *exec, int status, int result_code,
		      const void *data, size_t len);
void shm_sweep(const struct shm_view *v, const struct shm_sweep_ops *ops,
	       struct shm_sweep_stats *st);
void shm_sweep_since(const struct shm_view *v, const struct shm_sweep_ops *ops,
		     uint64_t unconfirmed_since_ns, struct shm_sweep_stats *st);
void shm_sweep_range(const struct shm_view *v, const struct shm_sweep_ops *ops,
		     uint64_t unconfirmed_since_ns, uint32_t from, uint32_t to,
		     struct shm_sweep_stats *st);
bool shm_give_back_unrecorded(const struct shm_view *v, uint32_t e);
bool shm_give_back_as(const struct shm_view *v, uint32_t e,
		      const uint8_t *exec);
uint32_t shm_reclaim(struct shm_view *v);
uint32_t shm_reclaim_some(struct shm_view *v, uint32_t *cursor,
			  uint32_t budget, uint32_t *walked);
bool shm_any_tomb(const struct shm_view *v, uint32_t from, uint32_t to);
bool shm_any_free(const struct shm_view *v);
int shm_entry_key(const struct shm_view *v, uint32_t e,
		  uint8_t id[3 * CARMY_ID_MAX], struct shm_key *k);
bool shm_entry_home(const struct shm_view *v, uint64_t w, uint32_t *home);
void shm_unblock_all(const struct shm_view *v);
uint32_t shm_unblock_scribbled(const struct shm_view *v);
uint32_t shm_unblock_scribbled_range(const struct shm_view *v, uint32_t from,
				     uint32_t to, bool *tomb);
void shm_repair_moves(struct shm_view *v);

#endif /* CARMY_SHM_H */
