/*
 * request.c - carmyd's requests: read from a connection (or taken from the
 * segment, where a client posted them), decoded, handled by type, and
 * answered: at once, or once a durable store has recorded them.
 *
 * A request to a durable store holds its connection: nothing more is read
 * from it until the store answers (on its own thread, to the connection's
 * loop: conn_store_done()), so replies keep their order. A client awaits
 * a RESERVE's or COMPLETE's success in its ack slot (shm_ack), anything
 * else on the socket: the last success of a shared store's run is told
 * there by the store's thread (tell()), others by the loop (finish(), or
 * answer() for a store that is not durable).
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/runfmt.h"
#include "daemon/carmyd.h"
#include "daemon/server.h"
#include "libclient/wire.h"

#define READ_CHUNK (64 * 1024)
/* Refused operator commands are logged at most once a second a user. */
#define DENY_LOG_NS 1000000000ull
/* A request handler's answer when it has dropped the connection; else 0,
 * or -ENOMEM when the reply could not be encoded (the encoders' codes). */
enum { DROPPED = 1 };

static int process(struct conn *c);
static int on_message(struct conn *c, const uint8_t *buf, size_t len);
static int on_request(struct conn *c, const struct wire_msg *m);
static int on_hello(struct conn *c, const struct wire_msg *m);
static int on_complete(struct conn *c, const struct wire_msg *m);
static int on_reserve(struct conn *c, const struct wire_msg *m);
static int on_release(struct conn *c, const struct wire_msg *m);
static int on_reclaim(struct conn *c);
static int on_purge(struct conn *c, const struct wire_msg *m);
static int on_forget(struct conn *c, const struct wire_msg *m);
static int on_abandon(struct conn *c, const struct wire_msg *m);
static int on_resolve(struct conn *c, const struct wire_msg *m);
static int on_wait(struct conn *c, const struct wire_msg *m);
static bool greeted(struct conn *c, const char *why);
static void told_of_release(struct server *sv, uint32_t entry);
static bool may_operate(struct conn *c, const char *what);
static bool peer_in_group(int fd, gid_t gid);
static int to_store(struct conn *c, int type, enum carmy_store_op op,
		    const struct wire_msg *m, int status, int code,
		    const uint8_t *data, size_t dlen);
static int answer(struct conn *c, int type, const uint8_t *exec, int rc);
static bool ack(struct conn *c, const uint8_t *exec, bool done);
static void hold(struct conn *c, struct store_op *op);
static void store_done(struct carmy_store_req *req, int rc);
static uint32_t tell(struct store_op *op, int rc);
static bool give_back(struct conn *c, const struct store_op *op);
static void finish(struct store_op *op);

/* ------------------------------------------------------------ reading */

void req_read(struct conn *c, uint32_t events)
{
	struct server *sv = c->loop->sv;

	for (;;) {
		ssize_t got;

		if (c->pending > 0) {
			/* Reading is paused until the store answers; only
			 * a hang-up gets through, and waits for it too.
			 * More input (a client that does not wait for its
			 * reply) takes EPOLLIN out until then. */
			if (events & (EPOLLHUP | EPOLLERR)) {
				conn_drop(c, "closed");
			} else if (c->armed & EPOLLIN) {
				/* (Again if epoll_ctl() failed last time.) */
				c->in_paused = true;
				conn_arm(c);
			}
			return;
		}

		if (c->rcap - c->rlen < READ_CHUNK && c->rcap < sv->msg_cap) {
			size_t ncap = c->rlen + READ_CHUNK;
			uint8_t *nb;

			if (ncap > sv->msg_cap)
				ncap = sv->msg_cap;
			nb = realloc(c->rbuf, ncap);
			if (nb == NULL) {
				conn_drop(c, "out of memory");
				return;
			}
			c->rbuf = nb;
			c->rcap = ncap;
		}
		size_t room = c->rcap - c->rlen;

		got = recv(c->fd, c->rbuf + c->rlen, room, 0);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return;
			conn_drop(c, strerror(errno));
			return;
		}
		if (got == 0) {
			conn_drop(c, "closed");
			return;
		}
		c->rlen += (size_t)got;
		if (process(c) != 0)
			return;	/* c is gone */
		/* A short read drained the socket: epoll (level-triggered)
		 * wakes us for more, so skip the recv that would say EAGAIN. */
		if ((size_t)got < room)
			return;
	}
}

/* Handle every whole message in the buffer, until one waits for the store.
 * Returns 0, or -1 if the connection was dropped. */
static int process(struct conn *c)
{
	struct server *sv = c->loop->sv;

	while (c->rlen > 0 && c->pending == 0) {
		long n = wire_scan_more(&c->scan, c->rbuf, c->rlen,
					sv->msg_cap);

		if (n < 0) {
			conn_fail(c, CARMY_EPROTOCOL,
				  "malformed or oversized message");
			return -1;
		}
		if (n == 0)
			break;
		if (on_message(c, c->rbuf, (size_t)n) != 0)
			return -1;
		memmove(c->rbuf, c->rbuf + n, c->rlen - (size_t)n);
		c->rlen -= (size_t)n;
		c->scan.off = 0;	/* the next message, afresh */
		c->scan.depth = 0;
	}
	return 0;
}

/* Handle one message. Returns 0, or -1 if the connection was dropped. */
static int on_message(struct conn *c, const uint8_t *buf, size_t len)
{
	struct wire_msg m;

	if (wire_decode(buf, len, 1, &m) != 0) {
		conn_fail(c, CARMY_EPROTOCOL, "undecodable message");
		return -1;
	}
	return on_request(c, &m);
}

/* ------------------------------------------------------------ requests */

/* Handle one request, sent or posted: one handler a message type. Returns
 * 0, or -1 if the connection was dropped. */
static int on_request(struct conn *c, const struct wire_msg *m)
{
	int rc;

	switch (m->type) {
	case WIRE_HELLO:
		rc = on_hello(c, m);
		break;
	case WIRE_COMPLETE:
		rc = on_complete(c, m);
		break;
	case WIRE_RECLAIM:
		rc = on_reclaim(c);
		break;
	case WIRE_RESOLVE:
		rc = on_resolve(c, m);
		break;
	case WIRE_WAIT:
		rc = on_wait(c, m);
		break;
	case WIRE_PURGE:
		rc = on_purge(c, m);
		break;
	case WIRE_FORGET:
		rc = on_forget(c, m);
		break;
	case WIRE_RESERVE:
		rc = on_reserve(c, m);
		break;
	case WIRE_RELEASE:
		rc = on_release(c, m);
		break;
	case WIRE_ABANDON:
		rc = on_abandon(c, m);
		break;
	default:
		conn_fail(c, CARMY_EPROTOCOL, "unknown message type");
		return -1;
	}
	if (rc == DROPPED)
		return -1;
	if (rc != 0) {
		conn_drop(c, "out of memory");
		return -1;
	}
	return conn_flush(c);
}

/* Has c said HELLO? If not, its client is told so (why) and dropped. */
static bool greeted(struct conn *c, const char *why)
{
	if (c->owner != 0)
		return true;
	conn_fail(c, CARMY_EPROTOCOL, why);
	return false;
}

/*
 * HELLO: check the client's protocol, layout and PID namespace, give it an
 * owner id (a new one, or its own back after a restart), an ack slot, and
 * with a durable store its loop's bell if it may post. Returns 0, DROPPED
 * or -ENOMEM.
 */
static int on_hello(struct conn *c, const struct wire_msg *m)
{
	struct server *sv = c->loop->sv;
	struct store *s = sv->store;
	uint32_t flags;
	int rc;

	if (c->owner != 0) {
		conn_fail(c, CARMY_EPROTOCOL, "second HELLO");
		return DROPPED;
	}
	/* Too late: told TOO_MANY_CLIENTS, and shut down. */
	if (conn_greet_del(c) == GREET_SHED) {
		conn_drop(c, "shed");
		return DROPPED;
	}
	if (m->u.hello.version != WIRE_VERSION ||
	    m->u.hello.layout != shm_layout_signature()) {
		conn_fail(c, CARMY_ELAYOUT,
			  "client built with another protocol or layout");
		return DROPPED;
	}
	if (!store_peer_pid_usable(c->pid)) {
		conn_fail(c, -EPERM, "a client in another PID namespace (its "
			  "pids name other processes here): run clients in "
			  "carmyd's");
		return DROPPED;
	}
	flags = (s->durable ? WIRE_F_DURABLE | WIRE_F_RELEASE_FIRST : 0) |
		(s->shared ? WIRE_F_SHARED : 0) | WIRE_F_ABANDON;
	/* A client of the previous carmyd, back for its owner id (and the
	 * reservations it holds); else a new id. Told to try again if its
	 * process cannot be told for now: under a new id it would never
	 * complete the calls it holds. */
	rc = m->u.hello.owner != 0 ?
		     store_resume(s, m->u.hello.owner, c->pid, c) : -EPERM;
	if (rc == -EAGAIN) {
		conn_fail(c, CARMY_EUNAVAILABLE, "cannot read /proc to tell "
			  "a client of the previous carmyd: try again");
		return DROPPED;
	}
	if (rc == 0) {
		c->owner = m->u.hello.owner;
		flags |= WIRE_F_RESUMED;
		log_info("owner %u (pid %d) is back from epoch %u", c->owner,
			 (int)c->pid, m->u.hello.epoch);
	} else if ((rc = store_new_owner(s, &c->owner)) != 0 ||
		   (rc = owners_add(c->owner, c)) != 0) {
		c->owner = 0;
		conn_fail(c, -ENOMEM, rc == -EOVERFLOW ?
			  "every owner id of this carmyd's epoch is handed "
			  "out (about 4 billion connections): restart carmyd" :
			  "cannot register owner");
		return DROPPED;
	}
	log_debug("owner %u is pid %d", c->owner, (int)c->pid);
	c->ack_slot = conn_ack_take(sv, &c->ack_gen);
	if (s->durable && c->ack_slot < SHM_ACK_SLOTS &&
	    c->loop->bell < SHM_BELLS)
		conn_posting_add(c);
	return wire_put_hello_ok(&c->out, c->owner, sv->cfg->shm_name,
				 s->view.geo.max_result, s->epoch, flags,
				 c->ack_slot,
				 c->post_ix != UINT_MAX ? c->loop->bell :
							  UINT32_MAX);
}

/*
 * COMPLETE: record an execution's result. A result larger than
 * --max-result is recorded as FAILED with RESULT_TOO_LARGE. A store that is
 * not durable has the segment as its record: written here, and answered
 * (a success in the client's ack slot). Returns 0, DROPPED or -ENOMEM.
 */
static int on_complete(struct conn *c, const struct wire_msg *m)
{
	struct server *sv = c->loop->sv;
	struct store *s = sv->store;
	int status = m->u.complete.status;
	int code = m->u.complete.result_code;
	const uint8_t *data = m->u.complete.result;
	size_t dlen = m->u.complete.result_len;
	int rc;

	if (!greeted(c, "COMPLETE before HELLO"))
		return DROPPED;
	if (status < CARMY_STATUS_COMPLETED ||
	    status > CARMY_STATUS_CANCELLED ||
	    (code != 0 && code != CARMY_ERESULT_TOO_LARGE))
		return answer(c, WIRE_COMPLETE, m->u.complete.exec,
			      CARMY_EINVALID_STATUS);
	if (dlen > s->view.geo.max_result) {
		/* Recorded, not dropped. */
		status = CARMY_STATUS_FAILED;
		code = CARMY_ERESULT_TOO_LARGE;
		dlen = 0;
	}
	if (s->durable)
		return to_store(c, WIRE_COMPLETE, CARMY_STORE_COMPLETE, m,
				status, code, data, dlen);
	rc = store_complete(s, m->u.complete.entry, c->owner,
			    m->u.complete.exec, status, code, data, dlen);
	if (rc == 0)
		conn_wake_waiters(sv, false, m->u.complete.entry, 0);
	if (rc != 0)
		log_debug("owner %u: completion of entry %u refused: %s",
			  c->owner, m->u.complete.entry, carmy_errname(rc));
	return answer(c, WIRE_COMPLETE, m->u.complete.exec, rc);
}

/*
 * RESERVE: the client has claimed an entry in the table. The segment is
 * the record of a store that is not durable: there is nothing to confirm.
 * A durable store records it first. Returns 0, DROPPED or -ENOMEM.
 */
static int on_reserve(struct conn *c, const struct wire_msg *m)
{
	if (!greeted(c, "RESERVE before HELLO"))
		return DROPPED;
	if (!c->loop->sv->store->durable)
		return wire_put_reply(&c->out, WIRE_RESERVE, 0);
	return to_store(c, WIRE_RESERVE, CARMY_STORE_RESERVE, m, 0, 0, NULL,
			0);
}

/*
 * RELEASE: the client gave an entry back in the table before it sent this,
 * so its waiters can have the identity now rather than at the next tick
 * (any entry number is harmless here; a waiter whose entry still runs
 * waits on). A durable store records it first. Returns 0, DROPPED or
 * -ENOMEM.
 */
static int on_release(struct conn *c, const struct wire_msg *m)
{
	struct server *sv = c->loop->sv;

	if (!greeted(c, "RESERVE before HELLO"))
		return DROPPED;
	if (!sv->store->durable) {
		told_of_release(sv, m->u.reserve.entry);
		return wire_put_reply(&c->out, WIRE_RELEASE, 0);
	}
	return to_store(c, WIRE_RELEASE, CARMY_STORE_RELEASE, m, 0, 0, NULL,
			0);
}

/*
 * ABANDON: the client lost track of one of its executions (a tool whose
 * end it cannot know): the entry becomes uncertain now, as at its death,
 * for an operator to resolve, and its waiters are told. Returns 0,
 * DROPPED or -ENOMEM.
 */
static int on_abandon(struct conn *c, const struct wire_msg *m)
{
	struct server *sv = c->loop->sv;
	int rc;

	if (!greeted(c, "ABANDON before HELLO"))
		return DROPPED;
	rc = store_abandon(sv->store, m->u.reserve.entry, c->owner,
			   m->u.reserve.exec);
	if (rc == 0) {
		log_info("owner %u (pid %d) lost track of entry %u: uncertain",
			 c->owner, (int)c->pid, m->u.reserve.entry);
		conn_wake_waiters(sv, false, m->u.reserve.entry, 0);
	}
	return wire_put_reply(&c->out, WIRE_ABANDON, rc);
}

/* RECLAIM: a client found the index full of released entries'
 * tombstones; free what can be freed. Returns 0, DROPPED or -ENOMEM. */
static int on_reclaim(struct conn *c)
{
	if (!greeted(c, "RECLAIM before HELLO"))
		return DROPPED;
	store_reclaim(c->loop->sv->store);
	return wire_put_reply(&c->out, WIRE_RECLAIM, 0);
}

/* PURGE: an operator forgets the completed entries that finished more than
 * older_than_ms ago (store_purge()). Returns 0, DROPPED or -ENOMEM. */
static int on_purge(struct conn *c, const struct wire_msg *m)
{
	if (!greeted(c, "PURGE before HELLO"))
		return DROPPED;
	if (!may_operate(c, "purge"))
		return wire_put_reply(&c->out, WIRE_PURGE,
				      CARMY_ENOT_PERMITTED);
	return wire_put_reply(&c->out, WIRE_PURGE,
			      store_purge(c->loop->sv->store,
					  m->u.purge.older_than_ms, c->uid,
					  c->pid));
}

/* FORGET: an operator forgets one completed execution (store_forget()),
 * named by its entry and execution id. Like a purge, it waits for a
 * durable store here. Returns 0, DROPPED or -ENOMEM. */
static int on_forget(struct conn *c, const struct wire_msg *m)
{
	if (!greeted(c, "FORGET before HELLO"))
		return DROPPED;
	if (!may_operate(c, "forget"))
		return wire_put_reply(&c->out, WIRE_FORGET,
				      CARMY_ENOT_PERMITTED);
	return wire_put_reply(&c->out, WIRE_FORGET,
			      store_forget(c->loop->sv->store,
					   m->u.reserve.entry,
					   m->u.reserve.exec, c->uid, c->pid));
}

/*
 * RESOLVE: an operator settles an interrupted execution, as committed (it
 * happened: record this result, replayed from now on; INVALID_RESULT if
 * it is not in the format the execution's client reads) or not (the
 * identity is free again). Who (the peer's uid and pid) and when are
 * recorded with it, and logged. With a durable store the record goes there
 * first, like a completion. Others are answered NOT_PERMITTED
 * (may_operate()). Returns 0, DROPPED or -ENOMEM.
 */
static int on_resolve(struct conn *c, const struct wire_msg *m)
{
	struct server *sv = c->loop->sv;
	struct store *s = sv->store;
	struct store_op *op;
	struct shm_key k;
	bool committed = m->u.settle.committed != 0;
	int status = m->u.settle.status;
	int rc;

	if (!greeted(c, "request before HELLO"))
		return DROPPED;
	if (!may_operate(c, "resolve"))
		return wire_put_reply(&c->out, WIRE_RESOLVE,
				      CARMY_ENOT_PERMITTED);
	rc = shm_key_init(&k, s->view.seed, m->u.settle.part[0],
			  m->u.settle.len[0], m->u.settle.part[1],
			  m->u.settle.len[1], m->u.settle.part[2],
			  m->u.settle.len[2]);
	if (rc == 0 && committed &&
	    (status < CARMY_STATUS_COMPLETED || status > CARMY_STATUS_CANCELLED))
		rc = CARMY_EINVALID_STATUS;
	if (rc == 0 && committed && m->u.settle.result_len > s->view.geo.max_result)
		rc = CARMY_ERESULT_TOO_LARGE;
	if (rc != 0)
		return wire_put_reply(&c->out, WIRE_RESOLVE, rc);
	op = calloc(1, sizeof(*op));
	if (op == NULL)
		return -ENOMEM;
	op->type = WIRE_RESOLVE;
	op->req.op = CARMY_STORE_RESOLVE;
	rc = store_find_uncertain(s, op, &k, m->u.settle.fp, m->u.settle.exec);
	/* A result every retry would fail to read is refused now, while
	 * the operator is there to give another. */
	if (rc == 0 && committed &&
	    !runfmt_readable(op->rec.result_format, m->u.settle.result,
			     m->u.settle.result_len)) {
		store_resolve_done(s, op->entry);
		rc = CARMY_EINVALID_RESULT;
	}
	if (rc != 0) {
		free(op);
		return wire_put_reply(&c->out, WIRE_RESOLVE, rc);
	}
	if (committed && m->u.settle.result_len > 0) {
		op->result = malloc(m->u.settle.result_len);
		if (op->result == NULL) {
			store_resolve_done(s, op->entry);
			free(op);
			return -ENOMEM;
		}
		memcpy(op->result, m->u.settle.result, m->u.settle.result_len);
	}
	op->rec.state = committed ? CARMY_STORE_COMPLETED : 0;
	op->rec.status = committed ? status : 0;
	op->rec.result = op->result;
	op->rec.result_len = committed ? (uint32_t)m->u.settle.result_len : 0;
	op->rec.finished_ns = op->rec.resolved_ns = clock_real_ns();
	op->rec.resolved_uid = (uint32_t)c->uid;
	op->rec.resolved_pid = (uint32_t)c->pid;
	if (log_level >= LOG_INFO) {
		char id[3][200];

		for (int i = 0; i < 3; i++)
			log_bytes(id[i], sizeof(id[i]), m->u.settle.part[i],
				  m->u.settle.len[i]);
		log_info("pid %d uid %u resolves entry %u (%s/%s/%s) as %s",
			 (int)c->pid, (unsigned)c->uid, op->entry, id[0],
			 id[1], id[2],
			 committed ? "committed" : "not committed");
	}
	if (!s->durable) {
		rc = store_resolve(s, op);
		store_resolve_done(s, op->entry);
		if (rc == 0)
			conn_wake_waiters(sv, false, op->entry, 0);
		free(op->result);
		free(op);
		return wire_put_reply(&c->out, WIRE_RESOLVE, rc);
	}
	hold(c, op);
	store_submit(s, op, c->loop->more);
	return 0;
}

/*
 * WAIT: answer once the execution stops running (completed, uncertain,
 * released, resolved) or timeout_ms pass, whichever is first; the waiter
 * then asks the table again. Nothing more is read from c meanwhile. The
 * end is seen at once for completions, resolutions and releases that
 * reach carmyd (libcarmy sends a RELEASE after freeing the entry) and for
 * sweeps; within the 100 ms tick for a release whose word was lost; the
 * deadline on time, by a timer armed for the nearest one. Returns 0,
 * DROPPED or -ENOMEM.
 */
static int on_wait(struct conn *c, const struct wire_msg *m)
{
	struct server *sv = c->loop->sv;
	struct store *s = sv->store;
	struct store_op *op;
	struct shm_key k;
	uint32_t entry;
	int rc;

	if (!greeted(c, "request before HELLO"))
		return DROPPED;
	rc = shm_key_init(&k, s->view.seed, m->u.settle.part[0],
			  m->u.settle.len[0], m->u.settle.part[1],
			  m->u.settle.len[1], m->u.settle.part[2],
			  m->u.settle.len[2]);
	if (rc == 0)
		rc = store_find_running(s, &k, m->u.settle.exec, &entry);
	if (rc == CARMY_ENOT_RESERVED)
		return wire_put_reply(&c->out, WIRE_WAIT, 0);	/* not running */
	if (rc != 0)
		return wire_put_reply(&c->out, WIRE_WAIT, rc);
	if (m->u.settle.timeout_ms == 0)
		return wire_put_reply(&c->out, WIRE_WAIT, -ETIMEDOUT);
	op = calloc(1, sizeof(*op));
	if (op == NULL)
		return -ENOMEM;
	op->type = WIRE_WAIT;
	op->entry = entry;
	memcpy(op->rec.exec, m->u.settle.exec, SHM_EXEC_LEN);
	op->deadline_ns = clock_mono_ns() +
			  (uint64_t)m->u.settle.timeout_ms * 1000000u;
	c->waiting = op;
	hold(c, op);
	pthread_mutex_lock(&sv->wait_lock);
	op->wnext = sv->waiters;
	sv->waiters = op;
	pthread_mutex_unlock(&sv->wait_lock);
	log_debug("entry %u: a wait of up to %u ms begins", entry,
		  m->u.settle.timeout_ms);
	/* It may have ended between the look and the registration. */
	conn_wake_waiters(sv, false, entry, 0);
	return 0;
}

/*
 * A client released entry in the table, then told us (a RELEASE): its
 * waiters can have the identity now rather than at the next tick. The
 * entry number is the client's word: out of range it is ignored, and a
 * waiter whose entry still runs waits on.
 */
static void told_of_release(struct server *sv, uint32_t entry)
{
	unsigned n;

	if (entry >= sv->store->view.geo.capacity)
		return;
	n = conn_wake_waiters(sv, false, entry, 0);
	if (n > 0)
		log_debug("entry %u released: %u waiter%s told at once", entry,
			  n, n == 1 ? "" : "s");
}

/*
 * May c's peer change entries that are not its own (RESOLVE, PURGE,
 * FORGET)? Its --group membership lets it write the segment, but what
 * carmyd changes on request is for carmyd's own user, root, and members
 * of --admin-group: as the peer's credentials were when it connected
 * (SO_PEERCRED's effective ids, SO_PEERGROUPS), never a name looked up
 * now. A refusal is logged with the peer's uid and pid, once per
 * connection and at most once a second a user (so that a second user
 * refused meanwhile is named too), with how many went unlogged.
 */
static bool may_operate(struct conn *c, const char *what)
{
	struct server *sv = c->loop->sv;
	const struct carmyd_config *cfg = sv->cfg;
	unsigned long quiet = 0;
	bool logged = false;

	if (c->operator < 0) {
		c->operator = c->uid == 0 || c->uid == geteuid();
		if (!c->operator && cfg->use_admin_group)
			c->operator = c->gid == cfg->admin_gid ||
				      peer_in_group(c->fd, cfg->admin_gid);
	}
	if (c->operator)
		return true;
	pthread_mutex_lock(&sv->deny_lock);
	if (!c->denied) {
		uint64_t now = clock_mono_ns();
		unsigned i, oldest = 0;

		/* The user's entry, else the one logged longest ago (an
		 * entry never used has at_ns 0). */
		for (i = 0; i < DENY_UIDS; i++) {
			if (sv->denied[i].at_ns != 0 &&
			    sv->denied[i].uid == c->uid)
				break;
			if (sv->denied[i].at_ns < sv->denied[oldest].at_ns)
				oldest = i;
		}
		if (i == DENY_UIDS || now - sv->denied[i].at_ns >= DENY_LOG_NS) {
			i = i == DENY_UIDS ? oldest : i;
			sv->denied[i].uid = c->uid;
			sv->denied[i].at_ns = now;
			quiet = sv->deny_quiet;
			sv->deny_quiet = 0;
			logged = true;
		}
	}
	if (!logged)
		sv->deny_quiet++;
	pthread_mutex_unlock(&sv->deny_lock);
	if (!logged)
		return false;
	c->denied = true;
	log_warn("pid %d uid %u: %s refused (NOT_PERMITTED): only uid %u, "
		 "root%s may (--admin-group); %lu more refused since the "
		 "last such line", (int)c->pid, (unsigned)c->uid, what,
		 (unsigned)geteuid(),
		 cfg->use_admin_group ? " and members of the admin group" : "",
		 quiet);
	return false;
}

/* Was gid among the peer's supplementary groups when it connected? */
static bool peer_in_group(int fd, gid_t gid)
{
	gid_t some[64], *groups = some;
	socklen_t len = sizeof(some);
	bool in = false;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0) {
		if (errno != ERANGE)
			return false;
		groups = malloc(len);
		if (groups == NULL ||
		    getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0) {
			free(groups);
			return false;
		}
	}
	for (size_t i = 0; i < len / sizeof(gid_t); i++)
		in |= groups[i] == gid;
	if (groups != some)
		free(groups);
	return in;
}

/* ------------------------------------------------------------ posts */

/*
 * Take the requests posted in the slots of this loop's connections
 * (shm_post) and handle each as if it had come on its socket: answered the
 * same way, in the slot or there. A connection with a request in hand
 * (sent or posted) is left until it is answered, as its socket is.
 * Called between batches of events only: a post may drop its connection.
 *
 * A post is taken only if it is a RESERVE and its connection's ack word
 * awaits the answer to it, as an honest client's is and does: any other
 * (written by another process) is dropped unanswered. A post that is not
 * whole (torn by a late writer, such as a client stalled since its
 * connection was dropped and its slot handed on) is not this client's
 * fault: carmyd tells it to send the request instead (RESEND).
 *
 * Returns how many were ready: if any, the loop must look again before it
 * sleeps (one call takes up to 64).
 */
unsigned req_take_posts(struct loop *l)
{
	const struct shm_view *v = &l->sv->store->view;
	struct conn *ready[64];
	unsigned n = 0;

	/* Those that have one first, so that each submission but the
	 * batch's last is marked "more" (the store may wait for it). */
	for (unsigned i = 0; i < l->nposting && n < 64; i++) {
		struct conn *c = l->posting[i];

		if (c->pending == 0 && !c->closing &&
		    shm_post_ready(v, c->ack_slot, c->ack_gen))
			ready[n++] = c;
	}
	for (unsigned i = 0; i < n; i++) {
		struct conn *c = ready[i];
		struct shm_post p;
		struct wire_msg m;
		int rc = shm_post_take(v, c->ack_slot, c->ack_gen, &p);

		if (rc == 0)
			continue;	/* taken back: it comes on the socket */
		if (rc < 0) {
			int told = shm_ack_any(v, c->ack_slot);

			log_warn("owner %u: a request posted in the segment "
				 "was not whole%s", c->owner,
				 told == SHM_ACK_MISSED ? " (and nobody waits "
				 "for it): dropped" : ": asked to send it");
			if (told == SHM_ACK_MISSED)
				continue;
			if (told == SHM_ACK_TOLD_ASLEEP)
				shm_ack_wake(v, c->ack_slot);
			if (wire_put_reply(&c->out, WIRE_RESEND, 0) != 0) {
				conn_drop(c, "out of memory");
				continue;
			}
			conn_flush(c);
			continue;
		}
		/* Whole, but not what an honest client posts: another
		 * writer's. Answered, it would be read as the answer to
		 * the client's next request; left alone, it harms none. */
		if (p.type != WIRE_RESERVE ||
		    !shm_ack_awaits(v, c->ack_slot, p.exec)) {
			log_warn("owner %u: a request posted in the segment "
				 "that its client does not wait for: dropped",
				 c->owner);
			continue;
		}
		memset(&m, 0, sizeof(m));
		m.type = WIRE_RESERVE;
		m.u.reserve.entry = p.entry;
		memcpy(m.u.reserve.exec, p.exec, sizeof(p.exec));
		l->more = i + 1 < n;
		(void)on_request(c, &m);	/* c may be gone after */
	}
	l->more = false;
	return n;
}

/* ------------------------------------------------------------ the store */

/*
 * Hand a reservation, completion or release to a durable store. The reply
 * is written when the store answers (finish()); until then nothing more is
 * read from c, so replies keep their order. A request the entry does not
 * back (not ours, not running, another exec id) is answered at once and
 * never reaches the store. Returns 0 or -ENOMEM, like the encoders.
 */
static int to_store(struct conn *c, int type, enum carmy_store_op sop,
		    const struct wire_msg *m, int status, int code,
		    const uint8_t *data, size_t dlen)
{
	struct server *sv = c->loop->sv;
	const uint8_t *exec = type == WIRE_COMPLETE ? m->u.complete.exec :
						      m->u.reserve.exec;
	struct store_op *op = calloc(1, sizeof(*op));
	int rc;

	if (op == NULL)
		return -ENOMEM;
	op->type = type;
	op->req.op = sop;
	op->entry = type == WIRE_COMPLETE ? m->u.complete.entry :
					    m->u.reserve.entry;
	rc = store_prepare(sv->store, op, c->owner, exec);
	/* Sent again after a reconnect, the first one recorded: that is the
	 * answer, as in the memory store's path. */
	if (rc != 0 && type == WIRE_COMPLETE &&
	    store_completed_as(sv->store, op->entry, exec, status, code, data,
			       dlen)) {
		free(op);
		return answer(c, type, exec, 0);
	}
	if (rc == 0 && type == WIRE_COMPLETE) {
		if (dlen > 0) {
			op->result = malloc(dlen);
			if (op->result == NULL) {
				free(op);
				return -ENOMEM;
			}
			memcpy(op->result, data, dlen);
		}
		op->rec.status = status;
		op->rec.result_code = code;
		op->rec.result = op->result;
		op->rec.result_len = (uint32_t)dlen;
		op->rec.finished_ns = clock_real_ns();
	}
	if (rc != 0) {
		log_debug("owner %u: %s of entry %u refused: %s", c->owner,
			  type == WIRE_COMPLETE ? "completion" :
			  type == WIRE_RESERVE ? "reservation" : "release",
			  op->entry, carmy_errname(rc));
		free(op);
		return answer(c, type, exec, rc);
	}
	hold(c, op);
	store_submit(sv->store, op, c->loop->more);
	return 0;
}

/*
 * Answer a RESERVE or COMPLETE at once (or without the store). A client
 * with an ack slot awaits these there (shm_ack): a success is told there
 * alone, anything else on the socket, and the slot says so. Other
 * requests are answered on the socket. Returns 0 or -ENOMEM, like the
 * encoders.
 */
static int answer(struct conn *c, int type, const uint8_t *exec, int rc)
{
	bool quiet = type == WIRE_RESERVE || type == WIRE_COMPLETE;

	if (quiet && rc == 0 && ack(c, exec, true))
		return 0;
	rc = wire_put_reply(&c->out, type, rc);
	if (quiet)
		(void)ack(c, exec, false);
	return rc;
}

/* Tell c's client in its slot that the answer to its request naming exec
 * is done, or on the socket. Returns false if the slot did not await it:
 * then the answer, success included, goes on the socket. */
static bool ack(struct conn *c, const uint8_t *exec, bool done)
{
	const struct shm_view *v = &c->loop->sv->store->view;
	int told = shm_ack(v, c->ack_slot, exec, done);

	if (told == SHM_ACK_TOLD_ASLEEP)
		shm_ack_wake(v, c->ack_slot);
	return told != SHM_ACK_MISSED;
}

/* Whether a loop polls for the store's answer to a request of this type
 * rather than sleep (loop->awaiting): not for a WAIT, which may take minutes, nor
 * for a shared store's requests, whose commits take a network round trip
 * and a flush: the polling loop is the busy CPU beside the database's
 * flush, and the answer is told on the store's thread (store_done()),
 * which wakes the loop as it wakes the client. */
static bool awaited(const struct server *sv, uint8_t type)
{
	return type != WIRE_WAIT && !sv->store->shared;
}

/* op is on its way (to the store, or waiting): its answer comes back to
 * c's loop through conn_store_done(). Until then c reads nothing more, and
 * shutdown waits for it. */
static void hold(struct conn *c, struct store_op *op)
{
	struct server *sv = c->loop->sv;

	op->conn = c;
	op->req.done = store_done;
	op->req.cookie = op;
	c->pending++;
	if (awaited(sv, op->type)) {
		c->loop->awaiting++;
		c->loop->await_until = clock_mono_ns() +
				       AWAIT_SPIN * 1000ull * sv->cfg->spin_us;
	}
	conn_arm(c);
	pthread_mutex_lock(&sv->idle_lock);
	sv->inflight++;
	pthread_mutex_unlock(&sv->idle_lock);
}

/*
 * The store's answer to a request held for it, on the store's thread: to
 * the connection's loop (conn_store_done()), told to the client first if
 * it comes alone (tell()), and the client woken last, once the loop is on
 * its way to finish the request and read the client's next one. op may
 * be gone by then: the slot's next holder would be woken for nothing,
 * which it takes for a spurious wake-up. The segment is still mapped:
 * carmyd unmaps it only once the store is closed, after its threads.
 */
static void store_done(struct carmy_store_req *req, int rc)
{
	struct store_op *op = req->cookie;
	struct conn *c = op->conn;
	const struct shm_view *v = &c->loop->sv->store->view;
	uint32_t slot = UINT32_MAX;

	if (!(req->flags & CARMY_STORE_ANSWERS_FOLLOW) &&
	    c->loop->sv->store->shared)
		slot = tell(op, rc);
	conn_store_done(req, rc);
	if (slot != UINT32_MAX)
		shm_ack_wake(v, slot);
}

/*
 * A shared store's success no other answer of its run follows (a run of
 * one, or a run's last) is written to the segment and told in the
 * client's slot on the store's thread, rather than once the loop takes
 * it: a wake-up of the loop fewer on the answer's way back. Not the
 * journal's: it answers on the thread that writes its next batch, whose
 * time is the journal's serial section (bench-journal was no faster at 1
 * and 4 clients, and slower at 16). The loop still finishes op
 * (finish(): the waiters, the connection's count, reading on). The rest of
 * a run is told by the loop, which wakes those clients while the store's
 * thread goes on with its next batch. A connection already closing is left
 * to the loop, which may give a reservation back, and so is one whose slot
 * no longer awaits the answer (the segment written, the client not told);
 * one that closes after this has been told, like a client that went away
 * right after reading its answer. Returns the slot whose sleeping client
 * is owed shm_ack_wake(), or UINT32_MAX.
 */
static uint32_t tell(struct store_op *op, int rc)
{
	struct conn *c = op->conn;
	struct store *s = c->loop->sv->store;
	int told;

	if (rc != 0 || c->closing)
		return UINT32_MAX;
	if (op->type == WIRE_COMPLETE) {
		op->told_rc = store_complete(s, op->entry, c->owner,
					     op->rec.exec, op->rec.status,
					     op->rec.result_code, op->result,
					     op->rec.result_len);
		told = op->told_rc != 0 ? SHM_ACK_MISSED :
		       shm_ack(&s->view, c->ack_slot, op->rec.exec, true);
	} else if (op->type == WIRE_RESERVE && !op->taken) {
		store_settle(s, op);
		told = shm_ack(&s->view, c->ack_slot, op->rec.exec, true);
	} else {
		return UINT32_MAX;
	}
	op->early = true;
	op->told = told != SHM_ACK_MISSED;
	return told == SHM_ACK_TOLD_ASLEEP ? c->ack_slot : UINT32_MAX;
}

/*
 * A shared store recorded op, a RESERVE, after its connection closed: the
 * client never learnt that it stands, so its tool never ran. Left alone,
 * the entry would turn uncertain here when the owner is swept, and the
 * identity with it on every instance, for a call that did not happen.
 * Release it in the store instead, then here (finish(), as a client's
 * RELEASE); the connection, and with it the owner, stays until then, so
 * that no sweep turns the entry uncertain meanwhile. Should the release
 * fail, carmyd sends it again until the store records it
 * (store_owe_release()). Returns false if no release could be sent.
 */
static bool give_back(struct conn *c, const struct store_op *op)
{
	struct store *s = c->loop->sv->store;
	struct store_op *rel = calloc(1, sizeof(*rel));

	if (rel == NULL)
		return false;
	rel->type = WIRE_RELEASE;
	rel->req.op = CARMY_STORE_RELEASE;
	rel->entry = op->entry;
	if (store_prepare(s, rel, c->owner, op->rec.exec) != 0) {
		free(rel);
		return false;
	}
	log_info("owner %u (pid %d) went away before its reservation of entry "
		 "%u was answered: releasing it", c->owner, (int)c->pid,
		 op->entry);
	hold(c, rel);
	store_submit(s, rel, false);
	return true;
}

/* Reply to every answered request, oldest first. */
void req_answered(struct loop *l)
{
	struct store_op *list, *fifo = NULL;
	uint64_t n;

	if (read(l->done_fd, &n, sizeof(n)) < 0) {
		/* spurious wake-up */
	}
	pthread_mutex_lock(&l->done_lock);
	list = l->done;
	l->done = NULL;
	pthread_mutex_unlock(&l->done_lock);
	while (list != NULL) {
		struct store_op *next = list->next;

		list->next = fifo;
		fifo = list;
		list = next;
	}
	while (fifo != NULL) {
		struct store_op *next = fifo->next;

		/* finish() may submit a request the connection had sent
		 * ahead: the answers still to send are more in hand. */
		l->more = next != NULL;
		finish(fifo);
		fifo = next;
	}
	l->more = false;
}

/*
 * The store has answered op. A completion it made durable is now recorded
 * in the segment too, so replays see it; only then is the client told.
 * Then the connection reads again, or, if it closed meanwhile, is dropped
 * now that nothing of its is in flight.
 */
static void finish(struct store_op *op)
{
	struct conn *c = op->conn;
	struct store *s = c->loop->sv->store;
	int type = op->type, rc = op->rc;
	uint8_t exec[SHM_EXEC_LEN], asked[SHM_EXEC_LEN];
	uint32_t state = 0;
	bool told = false;	/* in the client's slot alone (shm_ack) */

	memcpy(asked, op->rec.exec, sizeof(asked));

	if (type == WIRE_WAIT) {
		/* 0, -ETIMEDOUT or -ECANCELED: the waiter looks again. */
		c->waiting = NULL;
	} else if (rc == 0 && type == WIRE_COMPLETE) {
		rc = op->early ? op->told_rc :
		     store_complete(s, op->entry, c->owner, op->rec.exec,
				    op->rec.status, op->rec.result_code,
				    op->result, op->rec.result_len);
		if (rc == 0)
			conn_wake_waiters(c->loop->sv, false, op->entry, 0);
		told = op->early ? op->told :
		       rc == 0 && ack(c, op->rec.exec, true);
	} else if (rc == 0 && type == WIRE_RESERVE && op->told) {
		told = true;	/* it stands, and its client knows */
	} else if (rc == 0 && type == WIRE_RESERVE && !op->taken &&
		   c->closing && s->shared && give_back(c, op)) {
		/* Its client is gone and never heard it stands: released
		 * in the store, then given back here (below). */
	} else if (rc == 0 && type == WIRE_RESERVE && !op->taken) {
		if (!op->early)
			store_settle(s, op);	/* callers may name it */
		told = ack(c, op->rec.exec, true);
	} else if (rc == 0 && type == WIRE_RESERVE && op->taken) {
		/* Done even if the client has gone: its entry must not turn
		 * uncertain on a call another execution holds. */
		rc = store_taken(s, op, c->owner, c->pid, exec, &state);
		if (rc != CARMY_EUNCERTAIN && rc != CARMY_ECONFLICT)
			state = 0;
		log_debug("owner %u: entry %u is held in the store by another "
			  "execution: %s", c->owner, op->entry,
			  carmy_errname(rc));
	} else if (rc == 0 && type == WIRE_RELEASE) {
		if (!op->gone)
			rc = store_released(s, op, c->owner);
		told_of_release(c->loop->sv, op->entry);
	} else if (rc == 0 && type == WIRE_RESOLVE) {
		rc = store_resolve(s, op);
		store_resolve_done(s, op->entry);
		if (rc == 0)
			conn_wake_waiters(c->loop->sv, false, op->entry, 0);
	} else if (rc != 0) {
		if (type == WIRE_RESOLVE)
			store_resolve_done(s, op->entry);
		if (type == WIRE_RESERVE && s->shared)
			store_reserve_failed(s, op, c->owner);
		/* It may have committed: the identity may be free in the
		 * store already, so the entry is not left standing here.
		 * A store of ours only failed to record it: the entry is
		 * given back (after a reboot it is uncertain). */
		if (type == WIRE_RELEASE && s->shared && !op->gone)
			store_owe_release(s, op);
		else if (type == WIRE_RELEASE && !op->gone)
			(void)store_released(s, op, c->owner);
		log_warn("owner %u: the store failed a %s: %s", c->owner,
			 type == WIRE_RESERVE ? "reservation" :
			 type == WIRE_COMPLETE ? "completion" :
			 type == WIRE_RESOLVE ? "resolution" : "release",
			 strerror(-rc));
		rc = CARMY_ESTORE;
	}
	free(op->result);
	free((void *)op->standing.result);
	free(op);
	c->pending--;
	if (awaited(c->loop->sv, type))
		c->loop->awaiting--;
	if (c->closing) {
		if (c->pending == 0)
			conn_drop(c, c->why);
		return;
	}
	if (!told && (state != 0 ? wire_put_taken(&c->out, rc, exec, state) :
				   wire_put_reply(&c->out, type, rc)) != 0) {
		conn_drop(c, "out of memory");
		return;
	}
	if (!told && (type == WIRE_RESERVE || type == WIRE_COMPLETE))
		(void)ack(c, asked, false);	/* read the socket */
	if (c->pending == 0) {
		conn_arm(c);
		if (process(c) != 0)
			return;	/* c is gone */
	}
	conn_flush(c);
}

