/*
 * post.c - a durable store's RESERVE handed to carmyd in the segment
 * instead of on the socket.
 *
 * A client reserves in the segment with a CAS; with a durable store,
 * carmyd must then record the reservation before begin may answer
 * "reserved", and the client waits for that answer in its ack slot
 * (shm_ack, table.c). While the carmyd loop serving its connection is
 * awake it looks at its connections' slots after every batch of events, so
 * the request (entry and execution id) can wait there too: the client
 * writes it into its slot and the loop takes it, with no send() on one
 * side and no epoll wake-up and recv() on the other. When the loop may be
 * asleep the client takes the request back and sends it, as before.
 * Completions are never posted: they go to carmyd on the socket, as
 * msgpack, with their results.
 *
 * Waking, without a lost request (both sides use full barriers):
 *
 *   client: post (state READY)       loop, before it sleeps: awake = 0
 *           barrier                                          barrier
 *           awake? else take it back                         look at slots
 *
 * Either the loop's last look finds the request, or the client finds the
 * loop asleep (or both). Then one CAS decides: the loop's READY -> TAKEN or
 * the client's READY -> NONE. Taken back, it is sent on the socket, which
 * wakes the loop.
 *
 * The post word is gen << 2 | state, gen being the slot's generation (the
 * mark carmyd wrote when it handed the slot out), so a client whose
 * connection carmyd dropped cannot post into the next connection's slot.
 * The request's fields are plain stores before the READY word; the loop
 * copies them after its CAS and checks their sum, so one torn by a late
 * writer (a stale client stalled between its checks and its writes, or any
 * scribbler) is refused, never acted on. Nothing read is trusted.
 */
#include <errno.h>
#include <string.h>

#include <xxhash.h>

#include "shm/atomic.h"
#include "shm/shm.h"

#define POST_NONE 0u
#define POST_READY 1u
#define POST_TAKEN 2u

/* The sum of a request as posted in a slot of generation gen. */
static uint64_t post_sum(uint32_t gen, const struct shm_post *p)
{
	struct {
		uint32_t gen, type, entry;
		uint8_t exec[16];
	} h;

	memset(&h, 0, sizeof(h));
	h.gen = gen;
	h.type = p->type;
	h.entry = p->entry;
	memcpy(h.exec, p->exec, sizeof(h.exec));
	return XXH3_64bits(&h, sizeof(h));
}

/*
 * Client: post p in slot (of generation gen), served by the loop whose
 * bell is bell. Returns SHM_POSTED (the loop has it, or is awake and will
 * look: await the answer), SHM_WITHDRAWN (the loop may be asleep and did
 * not take it: send the request on the socket), or -ESTALE if the slot is
 * not of generation gen (carmyd handed it on) or holds a request not yet
 * taken: it is not ours to post in. The caller's ack word already awaits
 * the answer (shm_ack_expect).
 */
int shm_post(const struct shm_view *v, uint32_t slot, uint32_t bell,
	     uint32_t gen, const struct shm_post *p)
{
	struct shm_ack_slot *s;
	const uint32_t ready = gen << 2 | POST_READY;
	uint32_t w;

	if (slot >= SHM_ACK_SLOTS || bell >= SHM_BELLS)
		return SHM_WITHDRAWN;
	s = &v->acks[slot];
	w = shm_load(&s->ak_post);
	if (w >> 2 != (gen << 2) >> 2 || (w & 3u) == POST_READY)
		return -ESTALE;
	s->ak_type = p->type;
	s->ak_entry = p->entry;
	memcpy(s->ak_exec, p->exec, sizeof(s->ak_exec));
	s->ak_sum = post_sum(gen, p);
	/* After the fields; from what we saw, so that a slot handed on
	 * meanwhile is not written over. */
	if (shm_cas(&s->ak_post, w, ready) != w)
		return -ESTALE;
	shm_mb();
	if (shm_load(&v->bells[bell].bl_awake) != 0)
		return SHM_POSTED;
	return shm_cas(&s->ak_post, ready, gen << 2 | POST_NONE) == ready ?
		       SHM_WITHDRAWN : SHM_POSTED;
}

/* Client: take back the request posted in slot (generation gen) if carmyd
 * has not taken it. Returns true if it did: send it instead. */
bool shm_post_withdraw(const struct shm_view *v, uint32_t slot,
		       uint32_t gen)
{
	const uint32_t ready = gen << 2 | POST_READY;

	return slot < SHM_ACK_SLOTS &&
	       shm_cas(&v->acks[slot].ak_post, ready, gen << 2 | POST_NONE) ==
		       ready;
}

/* carmyd hands slot out as generation gen: nothing is posted in it. */
void shm_post_reset(const struct shm_view *v, uint32_t slot, uint32_t gen)
{
	if (slot < SHM_ACK_SLOTS)
		shm_store(&v->acks[slot].ak_post, gen << 2 | POST_NONE);
}

/* carmyd: is a request of generation gen waiting in slot? A hint: take it
 * with shm_post_take(). */
bool shm_post_ready(const struct shm_view *v, uint32_t slot, uint32_t gen)
{
	return slot < SHM_ACK_SLOTS &&
	       shm_load(&v->acks[slot].ak_post) == (gen << 2 | POST_READY);
}

/*
 * carmyd: take the request posted in slot by its connection (generation
 * gen) into *out. Returns 1 if one was taken and is whole, 0 if none was
 * waiting, or -EBADMSG if one was taken but is not what its client posted
 * (torn, or a scribble): it must be refused, never acted on.
 */
int shm_post_take(const struct shm_view *v, uint32_t slot, uint32_t gen,
		  struct shm_post *out)
{
	const uint32_t ready = gen << 2 | POST_READY;
	const volatile struct shm_ack_slot *s;

	if (slot >= SHM_ACK_SLOTS)
		return 0;
	if (shm_load(&v->acks[slot].ak_post) != ready ||
	    shm_cas(&v->acks[slot].ak_post, ready, gen << 2 | POST_TAKEN) !=
		    ready)
		return 0;
	/* Each field read once, as a client may still be writing it. */
	s = &v->acks[slot];
	memset(out, 0, sizeof(*out));
	out->type = s->ak_type;
	out->entry = s->ak_entry;
	for (size_t i = 0; i < sizeof(out->exec); i++)
		out->exec[i] = s->ak_exec[i];
	if (post_sum(gen, out) != s->ak_sum)
		return -EBADMSG;
	return 1;
}

/* carmyd: say whether the loop with this bell is awake (looks at posts).
 * Before it sleeps it says no, then looks once more (see above). */
void shm_bell_set(const struct shm_view *v, uint32_t bell, bool awake)
{
	if (bell >= SHM_BELLS)
		return;
	if (shm_load(&v->bells[bell].bl_awake) != (uint32_t)awake)
		shm_store(&v->bells[bell].bl_awake, (uint32_t)awake);
	shm_mb();
}
