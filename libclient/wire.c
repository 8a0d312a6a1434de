/*
 * wire.c - encoding, scanning and decoding of the messages in wire.h.
 *
 * msgpack-c trusts the element counts it reads and reserves memory for them
 * up front, so a five-byte array32 header claiming 4G elements costs
 * gigabytes. wire_scan() therefore walks every message
 * first, with a fixed-size stack and no allocation, and refuses any count or
 * length that could not fit in what remains of the size cap. Only a complete
 * message it accepted is passed to msgpack_unpack_next(), where each count is
 * then bounded by bytes that are really present.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "carmy.h"
#include "libclient/wire.h"

static uint64_t be(const uint8_t *p, int n);
static int get_uint(const msgpack_object *o, uint64_t max, uint64_t *out);
static int get_int(const msgpack_object *o, int32_t *out);
static int decode_from_client(const msgpack_object *a, uint32_t n,
			      struct wire_msg *m);
static int decode_from_daemon(const msgpack_object *a, uint32_t n,
			      struct wire_msg *m);

/* ------------------------------------------------------------ scanning */

long wire_scan(const void *buf, size_t len, size_t cap)
{
	struct wire_scanner sc = { 0 };

	return wire_scan_more(&sc, buf, len, cap);
}

/*
 * The scanner's state is committed only after a whole element (a header, or
 * a scalar with its body) is seen to be present, so "need more" leaves it at
 * an element boundary and the next call starts from there: bytes that
 * arrive one at a time are each looked at once, not rescanned from the
 * start of the message every time.
 */
long wire_scan_more(struct wire_scanner *sc, const void *buf, size_t len,
		    size_t cap)
{
	const uint8_t *p = buf;

	if (len > cap)
		len = cap;
	if (sc->depth == 0 && sc->off == 0) {
		sc->left[0] = 1;	/* one top-level object */
		sc->depth = 1;
	}
	for (;;) {
		uint64_t count = 0, size = 0;
		size_t h = 1, off = sc->off;
		bool container = false;
		uint8_t b;

		while (sc->depth > 0 && sc->left[sc->depth - 1] == 0)
			sc->depth--;
		if (sc->depth == 0)
			return (long)off;
		if (off >= len)
			return off >= cap ? CARMY_EPROTOCOL : 0;
		b = p[off];

		if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 ||
		    b == 0xc3) {
			h = 1;
		} else if (b <= 0x8f) {
			container = true;
			count = 2u * (b & 0x0f);
		} else if (b <= 0x9f) {
			container = true;
			count = b & 0x0f;
		} else if (b <= 0xbf) {
			size = b & 0x1f;
		} else {
			/* Header length of each 0xc4..0xdf type, 0 for 0xc1. */
			static const uint8_t hl[32] = {
				/* c0 */ 1, 0, 1, 1, 2, 3, 5, 3,
				/* c8 */ 4, 6, 5, 9, 2, 3, 5, 9,
				/* d0 */ 2, 3, 5, 9, 2, 2, 2, 2,
				/* d8 */ 2, 2, 3, 5, 3, 5, 3, 5,
			};
			h = hl[b - 0xc0];
			if (h == 0)
				return CARMY_EPROTOCOL;	/* 0xc1 never used */
			if (off + h > len)
				return off + h > cap ? CARMY_EPROTOCOL : 0;
			switch (b) {
			case 0xc4: case 0xc5: case 0xc6:	/* bin */
				size = be(p + off + 1, (int)h - 1);
				break;
			case 0xc7: case 0xc8: case 0xc9:	/* ext + type */
				size = be(p + off + 1, (int)h - 2);
				break;
			case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
				size = 1u << (b - 0xd4);	/* fixext */
				break;
			case 0xd9: case 0xda: case 0xdb:	/* str */
				size = be(p + off + 1, (int)h - 1);
				break;
			case 0xdc: case 0xdd:			/* array */
				container = true;
				count = be(p + off + 1, (int)h - 1);
				break;
			case 0xde: case 0xdf:			/* map */
				container = true;
				count = 2 * be(p + off + 1, (int)h - 1);
				break;
			default:	/* numbers: all in the header */
				break;
			}
		}
		if (off + h > len)
			return off + h > cap ? CARMY_EPROTOCOL : 0;
		off += h;
		if (container) {
			/* Every element takes at least one byte. An empty
			 * container still counts as a level, as it does in
			 * msgpack-c's parser stack. */
			if (count > cap - off || sc->depth > WIRE_MAX_DEPTH)
				return CARMY_EPROTOCOL;
			sc->left[sc->depth - 1]--;
			sc->off = off;
			if (count > 0)
				sc->left[sc->depth++] = count;
			continue;
		}
		if (size > cap - off)
			return CARMY_EPROTOCOL;
		if (off + size > len)
			return 0;
		sc->left[sc->depth - 1]--;
		sc->off = off + (size_t)size;
	}
}

/* ------------------------------------------------------------ decoding */

/*
 * Is the message (accepted by wire_scan()) one array of at most
 * WIRE_MAX_FIELDS elements, none of them an array or a map? Every message
 * of the protocol is. msgpack-c allocates some 24 bytes for every element
 * it unpacks, so without this an array of a million nils (a megabyte the
 * size cap allows) would cost carmyd 24 MB before it was refused.
 */
static bool flat(const uint8_t *p, size_t len)
{
	uint64_t n;
	size_t off;

	if (len == 0)
		return false;
	if (p[0] >= 0x90 && p[0] <= 0x9f) {
		n = p[0] & 0x0f;
		off = 1;
	} else if (p[0] == 0xdc && len >= 3) {
		n = be(p + 1, 2);
		off = 3;
	} else {
		return false;	/* array32 is never needed */
	}
	if (n > WIRE_MAX_FIELDS)
		return false;
	for (uint64_t i = 0; i < n; i++) {
		long one;

		if (off >= len || (p[off] >= 0x80 && p[off] <= 0x9f) ||
		    (p[off] >= 0xdc && p[off] <= 0xdf))
			return false;
		one = wire_scan(p + off, len - off, len - off);
		if (one <= 0)
			return false;
		off += (size_t)one;
	}
	return off == len;
}

int wire_decode(const void *buf, size_t len, int from_client,
		struct wire_msg *m)
{
	msgpack_unpacked up;
	size_t off = 0;
	uint64_t type;
	int rc = CARMY_EPROTOCOL;

	msgpack_unpacked_init(&up);
	if (!flat(buf, len) ||
	    msgpack_unpack_next(&up, buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
	    off != len || up.data.type != MSGPACK_OBJECT_ARRAY ||
	    up.data.via.array.size == 0)
		goto out;
	memset(m, 0, sizeof(*m));
	if (get_uint(&up.data.via.array.ptr[0], 255, &type) != 0)
		goto out;
	m->type = (int)type;
	if (from_client)
		rc = decode_from_client(up.data.via.array.ptr,
					up.data.via.array.size, m);
	else
		rc = decode_from_daemon(up.data.via.array.ptr,
					up.data.via.array.size, m);
out:
	/* Strings and bins point into buf, not into the zone. */
	msgpack_unpacked_destroy(&up);
	return rc;
}

static int decode_from_client(const msgpack_object *a, uint32_t n,
			      struct wire_msg *m)
{
	uint64_t v, e;

	switch (m->type) {
	case WIRE_HELLO:
		if ((n != 3 && n != 5) || get_uint(&a[1], UINT32_MAX, &v) != 0 ||
		    get_uint(&a[2], UINT64_MAX, &m->u.hello.layout) != 0)
			return CARMY_EPROTOCOL;
		m->u.hello.version = (uint32_t)v;
		if (n == 5) {
			if (get_uint(&a[3], UINT32_MAX, &e) != 0 || e == 0 ||
			    get_uint(&a[4], UINT32_MAX, &v) != 0)
				return CARMY_EPROTOCOL;
			m->u.hello.owner = (uint32_t)e;
			m->u.hello.epoch = (uint32_t)v;
		}
		return 0;
	case WIRE_COMPLETE:
		if (n != 6 || get_uint(&a[1], UINT32_MAX, &e) != 0 ||
		    a[2].type != MSGPACK_OBJECT_BIN || a[2].via.bin.size != 16 ||
		    get_int(&a[3], &m->u.complete.status) != 0 ||
		    get_int(&a[4], &m->u.complete.result_code) != 0 ||
		    a[5].type != MSGPACK_OBJECT_BIN)
			return CARMY_EPROTOCOL;
		m->u.complete.entry = (uint32_t)e;
		memcpy(m->u.complete.exec, a[2].via.bin.ptr, 16);
		m->u.complete.result = (const uint8_t *)a[5].via.bin.ptr;
		m->u.complete.result_len = a[5].via.bin.size;
		return 0;
	case WIRE_RECLAIM:
		return n == 1 ? 0 : CARMY_EPROTOCOL;
	case WIRE_PURGE:
		if (n != 2 ||
		    get_uint(&a[1], UINT64_MAX, &m->u.purge.older_than_ms) != 0)
			return CARMY_EPROTOCOL;
		return 0;
	case WIRE_RESERVE:
	case WIRE_RELEASE:
	case WIRE_FORGET:
	case WIRE_ABANDON:
		if (n != 3 || get_uint(&a[1], UINT32_MAX, &e) != 0 ||
		    a[2].type != MSGPACK_OBJECT_BIN || a[2].via.bin.size != 16)
			return CARMY_EPROTOCOL;
		m->u.reserve.entry = (uint32_t)e;
		memcpy(m->u.reserve.exec, a[2].via.bin.ptr, 16);
		return 0;
	case WIRE_RESOLVE:
	case WIRE_WAIT: {
		const msgpack_object *x = &a[4];

		if (n != (m->type == WIRE_RESOLVE ? 9u : 6u))
			return CARMY_EPROTOCOL;
		for (int i = 0; i < 3; i++) {
			if (a[1 + i].type != MSGPACK_OBJECT_BIN)
				return CARMY_EPROTOCOL;
			m->u.settle.part[i] =
				(const uint8_t *)a[1 + i].via.bin.ptr;
			m->u.settle.len[i] = a[1 + i].via.bin.size;
		}
		if (m->type == WIRE_RESOLVE) {
			if (x->type != MSGPACK_OBJECT_BIN ||
			    x->via.bin.size != 16)
				return CARMY_EPROTOCOL;
			memcpy(m->u.settle.fp, x->via.bin.ptr, 16);
			x++;
		}
		if (x->type != MSGPACK_OBJECT_BIN || x->via.bin.size != 16)
			return CARMY_EPROTOCOL;
		memcpy(m->u.settle.exec, x->via.bin.ptr, 16);
		x++;
		if (m->type == WIRE_WAIT) {
			if (get_uint(x, UINT32_MAX, &v) != 0)
				return CARMY_EPROTOCOL;
			m->u.settle.timeout_ms = (uint32_t)v;
			return 0;
		}
		if (get_uint(x, 1, &v) != 0 ||
		    get_int(x + 1, &m->u.settle.status) != 0 ||
		    x[2].type != MSGPACK_OBJECT_BIN)
			return CARMY_EPROTOCOL;
		m->u.settle.committed = (int)v;
		m->u.settle.result = (const uint8_t *)x[2].via.bin.ptr;
		m->u.settle.result_len = x[2].via.bin.size;
		return 0;
	}
	default:
		return CARMY_EPROTOCOL;
	}
}

static int decode_from_daemon(const msgpack_object *a, uint32_t n,
			      struct wire_msg *m)
{
	uint64_t owner, maxr, epoch, flags, slot, bell;

	switch (m->type) {
	case WIRE_HELLO:
		if (n != 9 || get_int(&a[1], &m->u.hello_ok.code) != 0 ||
		    get_uint(&a[2], UINT32_MAX, &owner) != 0 ||
		    a[3].type != MSGPACK_OBJECT_STR ||
		    a[3].via.str.size == 0 ||
		    a[3].via.str.size >= WIRE_SHM_NAME_MAX ||
		    memchr(a[3].via.str.ptr, 0, a[3].via.str.size) != NULL ||
		    get_uint(&a[4], UINT32_MAX, &maxr) != 0 ||
		    get_uint(&a[5], UINT32_MAX, &epoch) != 0 ||
		    get_uint(&a[6], UINT32_MAX, &flags) != 0 ||
		    get_uint(&a[7], UINT32_MAX, &slot) != 0 ||
		    get_uint(&a[8], UINT32_MAX, &bell) != 0)
			return CARMY_EPROTOCOL;
		m->u.hello_ok.flags = (uint32_t)flags;
		m->u.hello_ok.ack_slot = (uint32_t)slot;
		m->u.hello_ok.bell = (uint32_t)bell;
		m->u.hello_ok.owner = (uint32_t)owner;
		memcpy(m->u.hello_ok.shm_name, a[3].via.str.ptr,
		       a[3].via.str.size);
		m->u.hello_ok.max_result = (uint32_t)maxr;
		m->u.hello_ok.epoch = (uint32_t)epoch;
		return 0;
	case WIRE_RESERVE:
		if (n == 4) {
			uint64_t state;

			if (get_int(&a[1], &m->u.reply.code) != 0 ||
			    (m->u.reply.code != CARMY_EUNCERTAIN &&
			     m->u.reply.code != CARMY_ECONFLICT) ||
			    a[2].type != MSGPACK_OBJECT_BIN ||
			    a[2].via.bin.size != 16 ||
			    get_uint(&a[3], CARMY_STATE_INTERRUPTED, &state) != 0 ||
			    state == CARMY_STATE_NONE)
				return CARMY_EPROTOCOL;
			m->u.reply.taken = true;
			memcpy(m->u.reply.exec, a[2].via.bin.ptr, 16);
			m->u.reply.state = (uint32_t)state;
			return 0;
		}
		/* fall through */
	case WIRE_COMPLETE:
	case WIRE_RECLAIM:
	case WIRE_RELEASE:
	case WIRE_RESOLVE:
	case WIRE_WAIT:
	case WIRE_PURGE:
	case WIRE_FORGET:
	case WIRE_ABANDON:
	case WIRE_RESEND:
	case WIRE_ERROR:
		if (n != 2 || get_int(&a[1], &m->u.reply.code) != 0)
			return CARMY_EPROTOCOL;
		return 0;
	default:
		return CARMY_EPROTOCOL;
	}
}

/* ------------------------------------------------------------ encoding */

/* owner 0: a new owner; otherwise ask for owner back (of epoch). */
int wire_put_hello(msgpack_sbuffer *sb, uint64_t layout, uint32_t owner,
		   uint32_t epoch)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	if (msgpack_pack_array(&pk, owner ? 5 : 3) ||
	    msgpack_pack_uint8(&pk, WIRE_HELLO) ||
	    msgpack_pack_uint32(&pk, WIRE_VERSION) ||
	    msgpack_pack_uint64(&pk, layout) ||
	    (owner && (msgpack_pack_uint32(&pk, owner) ||
		       msgpack_pack_uint32(&pk, epoch))))
		return -ENOMEM;
	return 0;
}

int wire_put_reclaim(msgpack_sbuffer *sb)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	if (msgpack_pack_array(&pk, 1) || msgpack_pack_uint8(&pk, WIRE_RECLAIM))
		return -ENOMEM;
	return 0;
}

int wire_put_purge(msgpack_sbuffer *sb, uint64_t older_than_ms)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	if (msgpack_pack_array(&pk, 2) || msgpack_pack_uint8(&pk, WIRE_PURGE) ||
	    msgpack_pack_uint64(&pk, older_than_ms))
		return -ENOMEM;
	return 0;
}

int wire_put_complete(msgpack_sbuffer *sb, uint32_t entry,
		      const uint8_t exec[16], int status, int result_code,
		      const void *result, size_t len)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	if (msgpack_pack_array(&pk, 6) ||
	    msgpack_pack_uint8(&pk, WIRE_COMPLETE) ||
	    msgpack_pack_uint32(&pk, entry) || msgpack_pack_bin(&pk, 16) ||
	    msgpack_pack_bin_body(&pk, exec, 16) ||
	    msgpack_pack_int32(&pk, status) ||
	    msgpack_pack_int32(&pk, result_code) ||
	    msgpack_pack_bin(&pk, len) ||
	    (len > 0 && msgpack_pack_bin_body(&pk, result, len)))
		return -ENOMEM;
	return 0;
}

/* RESERVE [4, entry, exec], RELEASE [5, entry, exec] or FORGET [10, entry,
 * exec]. */
int wire_put_reserve(msgpack_sbuffer *sb, int type, uint32_t entry,
		     const uint8_t exec[16])
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	if (msgpack_pack_array(&pk, 3) ||
	    msgpack_pack_uint8(&pk, (uint8_t)type) ||
	    msgpack_pack_uint32(&pk, entry) ||
	    msgpack_pack_bin(&pk, 16) || msgpack_pack_bin_body(&pk, exec, 16))
		return -ENOMEM;
	return 0;
}

int wire_put_settle(msgpack_sbuffer *sb, int type, const void *const part[3],
		    const size_t len[3], const uint8_t exec[16],
		    const uint8_t fp[16], int committed, int status,
		    const void *result, size_t result_len,
		    uint32_t timeout_ms)
{
	msgpack_packer pk;
	bool resolve = type == WIRE_RESOLVE;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	if (msgpack_pack_array(&pk, resolve ? 9 : 6) ||
	    msgpack_pack_uint8(&pk, (uint8_t)type))
		return -ENOMEM;
	for (int i = 0; i < 3; i++)
		if (msgpack_pack_bin(&pk, len[i]) ||
		    msgpack_pack_bin_body(&pk, part[i], len[i]))
			return -ENOMEM;
	if ((resolve && (msgpack_pack_bin(&pk, 16) ||
			 msgpack_pack_bin_body(&pk, fp, 16))) ||
	    msgpack_pack_bin(&pk, 16) || msgpack_pack_bin_body(&pk, exec, 16))
		return -ENOMEM;
	if (!resolve)
		return msgpack_pack_uint32(&pk, timeout_ms) ? -ENOMEM : 0;
	if (msgpack_pack_uint8(&pk, committed ? 1 : 0) ||
	    msgpack_pack_int32(&pk, status) ||
	    msgpack_pack_bin(&pk, result_len) ||
	    (result_len > 0 && msgpack_pack_bin_body(&pk, result, result_len)))
		return -ENOMEM;
	return 0;
}

int wire_put_hello_ok(msgpack_sbuffer *sb, uint32_t owner,
		      const char *shm_name, uint32_t max_result,
		      uint32_t epoch, uint32_t flags, uint32_t ack_slot,
		      uint32_t bell)
{
	size_t n = strlen(shm_name);
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	if (msgpack_pack_array(&pk, 9) || msgpack_pack_uint8(&pk, WIRE_HELLO) ||
	    msgpack_pack_int32(&pk, 0) || msgpack_pack_uint32(&pk, owner) ||
	    msgpack_pack_str(&pk, n) || msgpack_pack_str_body(&pk, shm_name, n) ||
	    msgpack_pack_uint32(&pk, max_result) ||
	    msgpack_pack_uint32(&pk, epoch) || msgpack_pack_uint32(&pk, flags) ||
	    msgpack_pack_uint32(&pk, ack_slot) || msgpack_pack_uint32(&pk, bell))
		return -ENOMEM;
	return 0;
}

int wire_put_reply(msgpack_sbuffer *sb, int type, int code)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	if (msgpack_pack_array(&pk, 2) || msgpack_pack_uint8(&pk, (uint8_t)type) ||
	    msgpack_pack_int32(&pk, code))
		return -ENOMEM;
	return 0;
}

int wire_put_taken(msgpack_sbuffer *sb, int code, const uint8_t exec[16],
		   uint32_t state)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	if (msgpack_pack_array(&pk, 4) ||
	    msgpack_pack_uint8(&pk, WIRE_RESERVE) ||
	    msgpack_pack_int32(&pk, code) || msgpack_pack_bin(&pk, 16) ||
	    msgpack_pack_bin_body(&pk, exec, 16) ||
	    msgpack_pack_uint32(&pk, state))
		return -ENOMEM;
	return 0;
}

/* ------------------------------------------------------------ helpers */

static uint64_t be(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = (v << 8) | p[i];
	return v;
}

static int get_uint(const msgpack_object *o, uint64_t max, uint64_t *out)
{
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max)
		return -1;
	*out = o->via.u64;
	return 0;
}

static int get_int(const msgpack_object *o, int32_t *out)
{
	if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
	    o->via.u64 <= INT32_MAX) {
		*out = (int32_t)o->via.u64;
		return 0;
	}
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER &&
	    o->via.i64 >= INT32_MIN) {
		*out = (int32_t)o->via.i64;
		return 0;
	}
	return -1;
}
