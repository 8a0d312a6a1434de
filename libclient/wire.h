/*
 * wire.h - the one definition of what libcarmy and carmyd say to each other
 * over the Unix socket. Both sides link wire.c.
 *
 * Every message is one msgpack array whose first element is its type. The
 * stream needs no other framing: msgpack is self-delimiting, and wire_scan()
 * finds where a message ends before msgpack-c ever sees it.
 *
 *   client -> carmyd
 *     HELLO     [1, version, layout_signature]
 *               [1, version, layout_signature, owner, epoch]  give me back
 *               the owner id I had under that epoch (a restarted carmyd)
 *     COMPLETE  [2, entry, exec(bin 16), status, result_code, result(bin)]
 *     RECLAIM   [3]   the index is all tombstones: reclaim them now
 *     RESERVE   [4, entry, exec(bin 16)]   make this reservation durable
 *     RELEASE   [5, entry, exec(bin 16)]   make this release durable
 *     RESOLVE   [6, principal, session, request_id (bin each), fp(bin 16),
 *                exec(bin 16), committed(0|1), status, result(bin)]
 *     WAIT      [7, principal, session, request_id (bin each), exec(bin 16),
 *                timeout_ms]   answer once that execution is no longer
 *                              running, or the time is up
 *     PURGE     [8, older_than_ms]  forget completed entries that old
 *     FORGET    [10, entry, exec(bin 16)]  forget that completed execution
 *     ABANDON   [11, entry, exec(bin 16)]  I lost track of this execution
 *               of mine: make it uncertain (only to a carmyd whose HELLO
 *               reply carries WIRE_F_ABANDON)
 *
 *   carmyd -> client (one reply per request, in order, but for the
 *   successes below)
 *     HELLO     [1, 0, owner, shm_name(str), max_result, epoch, flags,
 *                ack_slot, bell]
 *     COMPLETE  [2, code]
 *     RECLAIM   [3, code]
 *     RESERVE   [4, code]
 *               [4, code, exec(bin 16), state]  a shared store found the
 *               identity running elsewhere: code CARMY_EUNCERTAIN or
 *               CARMY_ECONFLICT, exec and CARMY_STATE_* are the standing
 *               execution's; carmyd has given back the client's entry.
 *               (Code CARMY_REPLAY: it found it completed, and carmyd put
 *               the result where the client's entry was: look again.)
 *     RELEASE   [5, code]
 *     RESOLVE   [6, code]
 *     WAIT      [7, code]   0: it is not running any more; -ETIMEDOUT
 *     PURGE     [8, code]   >= 0: how many were forgotten
 *     FORGET    [10, code]  0; -ENOENT: entry does not hold exec; -EBUSY:
 *                           it is running or uncertain, not completed
 *     ABANDON   [11, code]  0, CARMY_ENOT_OWNER or CARMY_ENOT_RESERVED
 *     RESEND    [9, 0]      the request posted in the slot was not whole
 *                           (torn by another writer): send it instead
 *     ERROR     [0, code]   carmyd closes the connection after it; code
 *                             TOO_MANY_CLIENTS may come first thing, before
 *                             the HELLO is read (--max-clients)
 *
 * RESERVE and RELEASE are sent only to a carmyd whose HELLO reply carries
 * WIRE_F_DURABLE: its store records reservations durably, so begin() may
 * answer "reserved" only once carmyd has (docs/journal.md). With
 * WIRE_F_SHARED too, the store is shared by several carmyds: a RELEASE is
 * sent before the entry is given back, and carmyd gives it back. So it is
 * with WIRE_F_RELEASE_FIRST; without either, the client gives the entry
 * back, then sends the RELEASE.
 *
 * With WIRE_F_DURABLE and an ack_slot below SHM_ACK_SLOTS (the
 * connection's own word in the segment, for as long as it is open), a
 * RESERVE or COMPLETE that succeeds gets no reply if the client set the
 * word to await it before it sent the request: the word tells it
 * (shm_ack; carmyd marks the slot before the HELLO reply, and the client
 * awaits with a CAS from that mark or its last answer). Any other answer
 * is a reply, and the word says to read it.
 *
 * With a bell below SHM_BELLS too (that of the carmyd loop serving the
 * connection), such a RESERVE may be posted in the slot instead of sent,
 * while the bell says the loop is awake (shm_post, shm/post.c); it is
 * answered the same way. The slot's generation is its mark >> 2. A
 * COMPLETE is always sent.
 */
#ifndef CARMY_WIRE_H
#define CARMY_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "carmy.h"

#define WIRE_VERSION 5
#define WIRE_MAX_DEPTH 32
/* Every message is one flat array of at most this many elements. */
#define WIRE_MAX_FIELDS 16
#define WIRE_SHM_NAME_MAX 64
/* HELLO reply flags. */
#define WIRE_F_DURABLE 1u	/* confirm reservations and releases */
#define WIRE_F_RESUMED 2u	/* the owner id asked for was given back */
#define WIRE_F_SHARED 4u	/* its store is shared with other carmyds */
#define WIRE_F_ABANDON 8u	/* it takes ABANDON */
#define WIRE_F_RELEASE_FIRST 16u /* a RELEASE before the entry is freed */
/* Bytes a message needs beyond its result: a RESOLVE, the largest, carries
 * the identity (three parts of up to CARMY_ID_MAX bytes) too. */
#define WIRE_OVERHEAD (3 * (CARMY_ID_MAX + 5) + 128)

enum wire_type {
	WIRE_ERROR = 0,
	WIRE_HELLO = 1,
	WIRE_COMPLETE = 2,
	WIRE_RECLAIM = 3,
	WIRE_RESERVE = 4,
	WIRE_RELEASE = 5,
	WIRE_RESOLVE = 6,
	WIRE_WAIT = 7,
	WIRE_PURGE = 8,
	WIRE_RESEND = 9,	/* carmyd -> client only */
	WIRE_FORGET = 10,
	WIRE_ABANDON = 11,
};

/* One decoded message, either direction. Pointers refer into the buffer
 * that was decoded and live as long as it does. */
struct wire_msg {
	int type;
	union {
		struct {
			uint32_t version;
			uint64_t layout;
			uint32_t owner;	/* 0, or the one to resume */
			uint32_t epoch;
		} hello;
		struct {
			int32_t code;
			uint32_t owner;
			char shm_name[WIRE_SHM_NAME_MAX];
			uint32_t max_result;
			uint32_t epoch;
			uint32_t flags;
			uint32_t ack_slot;	/* UINT32_MAX: none */
			uint32_t bell;		/* UINT32_MAX: none */
		} hello_ok;
		struct {
			uint32_t entry;
			uint8_t exec[16];
			int32_t status;
			int32_t result_code;
			const uint8_t *result;
			size_t result_len;
		} complete;
		struct {
			uint32_t entry;
			uint8_t exec[16];
		} reserve;	/* RESERVE, RELEASE and FORGET requests */
		struct {
			const uint8_t *part[3];	/* the identity */
			size_t len[3];
			uint8_t exec[16];
			uint8_t fp[16];		/* RESOLVE only, as below */
			int committed;
			int32_t status;
			const uint8_t *result;
			size_t result_len;
			uint32_t timeout_ms;	/* WAIT only */
		} settle;	/* RESOLVE and WAIT requests */
		struct {
			uint64_t older_than_ms;
		} purge;
		struct {
			int32_t code;
			/* RESERVE, from a shared store: who holds it. */
			bool taken;
			uint8_t exec[16];
			uint32_t state;
		} reply;	/* every reply but HELLO's, and ERROR */
	} u;
};

/* Is there one whole msgpack object at the start of buf? Returns its length
 * (> 0), 0 if more bytes are needed, or CARMY_EPROTOCOL if the bytes can
 * never become a message of at most cap bytes: a reserved byte (0xc1),
 * nesting deeper than WIRE_MAX_DEPTH, or a length or element count that
 * would exceed cap. Runs in O(len) with no allocation, so it is safe on any
 * bytes; only what it accepts is given to msgpack-c. */
long wire_scan(const void *buf, size_t len, size_t cap);

/* wire_scan() for a message that arrives in pieces: the same answers, but
 * resumed where the last call stopped, so every byte is looked at once.
 * Start from a zeroed scanner, call again with the same (grown) buffer after
 * 0, and zero it again after a message is taken (> 0) before scanning the
 * next one from the start of the buffer. */
struct wire_scanner {
	size_t off;		/* whole elements seen up to here */
	int depth;		/* 0 and off 0: fresh */
	uint64_t left[WIRE_MAX_DEPTH + 1];	/* elements left per level */
};
long wire_scan_more(struct wire_scanner *sc, const void *buf, size_t len,
		    size_t cap);

/* Decode exactly one message of len bytes, already accepted by wire_scan().
 * from_client selects which direction's shapes are valid. Returns 0 or
 * CARMY_EPROTOCOL. */
int wire_decode(const void *buf, size_t len, int from_client,
		struct wire_msg *m);

/* Encoders append one message to sb. They return 0 or -ENOMEM. */
int wire_put_hello(msgpack_sbuffer *sb, uint64_t layout, uint32_t owner,
		   uint32_t epoch);
int wire_put_reclaim(msgpack_sbuffer *sb);
int wire_put_purge(msgpack_sbuffer *sb, uint64_t older_than_ms);
int wire_put_complete(msgpack_sbuffer *sb, uint32_t entry,
		      const uint8_t exec[16], int status, int result_code,
		      const void *result, size_t len);
int wire_put_reserve(msgpack_sbuffer *sb, int type, uint32_t entry,
		     const uint8_t exec[16]);
/* RESOLVE (fp, committed, status, result used) or WAIT (timeout_ms). */
int wire_put_settle(msgpack_sbuffer *sb, int type, const void *const part[3],
		    const size_t len[3], const uint8_t exec[16],
		    const uint8_t fp[16], int committed, int status,
		    const void *result, size_t result_len,
		    uint32_t timeout_ms);
int wire_put_hello_ok(msgpack_sbuffer *sb, uint32_t owner,
		      const char *shm_name, uint32_t max_result,
		      uint32_t epoch, uint32_t flags, uint32_t ack_slot,
		      uint32_t bell);
int wire_put_reply(msgpack_sbuffer *sb, int type, int code);
int wire_put_taken(msgpack_sbuffer *sb, int code, const uint8_t exec[16],
		   uint32_t state);

#endif /* CARMY_WIRE_H */
