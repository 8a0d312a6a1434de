/*
 * check_wire.c - the wire scanner and codec: whole, partial and hostile
 * messages, and every message shape both ways.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "libclient/wire.h"

#define CAP 1024

static long scan(const char *bytes, size_t n)
{
	return wire_scan(bytes, n, CAP);
}

START_TEST(test_whole_message_length_and_partial_need_more)
{
	msgpack_sbuffer sb;
	uint8_t exec[16] = { 1 };

	msgpack_sbuffer_init(&sb);
	ck_assert_int_eq(wire_put_complete(&sb, 7, exec, 1, 0, "result", 6), 0);
	ck_assert_int_eq(wire_scan(sb.data, sb.size, CAP), (long)sb.size);
	for (size_t i = 0; i < sb.size; i++)
		ck_assert_int_eq(wire_scan(sb.data, i, CAP), 0);
	/* Two messages back to back: the first is found alone. */
	ck_assert_int_eq(wire_put_reply(&sb, WIRE_COMPLETE, 0), 0);
	ck_assert_int_lt(wire_scan(sb.data, sb.size, CAP), (long)sb.size);
	msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(test_hostile_container_headers_rejected_without_allocation)
{
	ck_assert_int_eq(scan("\xdd\xff\xff\xff\xff", 5), CARMY_EPROTOCOL);
	ck_assert_int_eq(scan("\xdf\xff\xff\xff\xff", 5), CARMY_EPROTOCOL);
	ck_assert_int_eq(scan("\xdd\xff\xff\xff\xff\x00", 6), CARMY_EPROTOCOL);
	ck_assert_int_eq(scan("\xc6\xff\xff\xff\xff", 5), CARMY_EPROTOCOL);
	ck_assert_int_eq(scan("\xdb\x00\x10\x00\x00", 5), CARMY_EPROTOCOL);
	ck_assert_int_eq(scan("\xc9\x7f\xff\xff\xff\x01", 6), CARMY_EPROTOCOL);
	ck_assert_int_eq(scan("\xc1", 1), CARMY_EPROTOCOL);
	ck_assert_int_eq(scan("\x92\xc1", 2), CARMY_EPROTOCOL);
	/* A count that fits the cap is only "need more". */
	ck_assert_int_eq(scan("\xdc\x00\x10", 3), 0);
}
END_TEST

START_TEST(test_nesting_beyond_limit_rejected)
{
	char deep[64];

	/* 32 nested arrays around a 1 are fine; 40 are not. */
	memset(deep, 0x91, sizeof(deep));
	deep[WIRE_MAX_DEPTH] = 0x01;
	ck_assert_int_eq(scan(deep, WIRE_MAX_DEPTH + 1), WIRE_MAX_DEPTH + 1);
	memset(deep, 0x91, sizeof(deep));
	deep[40] = 0x01;
	ck_assert_int_eq(scan(deep, 41), CARMY_EPROTOCOL);
}
END_TEST

START_TEST(test_message_beyond_cap_rejected)
{
	char *big = calloc(1, 2 * CAP);

	big[0] = (char)0xc5;	/* bin16 of 2000 bytes */
	big[1] = 0x07;
	big[2] = (char)0xd0;
	ck_assert_int_eq(wire_scan(big, 3, CAP), CARMY_EPROTOCOL);
	/* array16 of 1000 three-byte bins: 3003 bytes, over the cap. */
	big[0] = (char)0xdc;
	big[1] = 0x03;
	big[2] = (char)0xe8;
	for (int i = 0; i < 600; i++)
		memcpy(big + 3 + 3 * i, "\xc4\x01\x00", 3);
	ck_assert_int_eq(wire_scan(big, 2 * CAP, CAP), CARMY_EPROTOCOL);
	free(big);
}
END_TEST

START_TEST(test_every_message_round_trips)
{
	msgpack_sbuffer sb;
	struct wire_msg m;
	uint8_t exec[16];

	memset(exec, 0xab, sizeof(exec));
	msgpack_sbuffer_init(&sb);
	ck_assert_int_eq(wire_put_hello(&sb, UINT64_C(0xfedcba9876543210), 0,
					0), 0);
	ck_assert_int_eq(wire_decode(sb.data, sb.size, 1, &m), 0);
	ck_assert_int_eq(m.type, WIRE_HELLO);
	ck_assert_uint_eq(m.u.hello.version, WIRE_VERSION);
	ck_assert(m.u.hello.layout == UINT64_C(0xfedcba9876543210));
	ck_assert_uint_eq(m.u.hello.owner, 0);
	/* A client message is not a valid daemon message, and vice versa. */
	ck_assert_int_eq(wire_decode(sb.data, sb.size, 0, &m), CARMY_EPROTOCOL);

	/* Asking for an owner id back, after a restart. */
	sb.size = 0;
	ck_assert_int_eq(wire_put_hello(&sb, 7, 33, 4), 0);
	ck_assert_int_eq(wire_decode(sb.data, sb.size, 1, &m), 0);
	ck_assert_int_eq(m.type, WIRE_HELLO);
	ck_assert_uint_eq(m.u.hello.owner, 33);
	ck_assert_uint_eq(m.u.hello.epoch, 4);

	sb.size = 0;
	ck_assert_int_eq(wire_put_complete(&sb, 42, exec, 3, 0, "a\0b", 3), 0);
	ck_assert_int_eq(wire_decode(sb.data, sb.size, 1, &m), 0);
	ck_assert_int_eq(m.type, WIRE_COMPLETE);
	ck_assert_uint_eq(m.u.complete.entry, 42);
	ck_assert_mem_eq(m.u.complete.exec, exec, 16);
	ck_assert_int_eq(m.u.complete.status, 3);
	ck_assert_uint_eq(m.u.complete.result_len, 3);
	ck_assert_mem_eq(m.u.complete.result, "a\0b", 3);

	sb.size = 0;
	ck_assert_int_eq(wire_put_hello_ok(&sb, 17, "/carmy.0.x", 4096, 3,
					   WIRE_F_DURABLE, 5, 1), 0);
	ck_assert_int_eq(wire_decode(sb.data, sb.size, 0, &m), 0);
	ck_assert_uint_eq(m.u.hello_ok.owner, 17);
	ck_assert_str_eq(m.u.hello_ok.shm_name, "/carmy.0.x");
	ck_assert_uint_eq(m.u.hello_ok.max_result, 4096);
	ck_assert_uint_eq(m.u.hello_ok.epoch, 3);
	ck_assert_uint_eq(m.u.hello_ok.flags, WIRE_F_DURABLE);
	ck_assert_uint_eq(m.u.hello_ok.ack_slot, 5);
	ck_assert_uint_eq(m.u.hello_ok.bell, 1);

	sb.size = 0;
	ck_assert_int_eq(wire_put_reserve(&sb, WIRE_RESERVE, 77, exec), 0);
	ck_assert_int_eq(wire_decode(sb.data, sb.size, 1, &m), 0);
	ck_assert_int_eq(m.type, WIRE_RESERVE);
	ck_assert_uint_eq(m.u.reserve.entry, 77);
	ck_assert_mem_eq(m.u.reserve.exec, exec, 16);

	sb.size = 0;
	ck_assert_int_eq(wire_put_reserve(&sb, WIRE_RELEASE, 9, exec), 0);
	ck_assert_int_eq(wire_decode(sb.data, sb.size, 1, &m), 0);
	ck_assert_int_eq(m.type, WIRE_RELEASE);
	ck_assert_uint_eq(m.u.reserve.entry, 9);
	ck_assert_mem_eq(m.u.reserve.exec, exec, 16);
	/* A client's RELEASE is not a reply: each direction has its shape. */
	ck_assert_int_eq(wire_decode(sb.data, sb.size, 0, &m), CARMY_EPROTOCOL);

	/* An operator's FORGET of one execution, and its answer. */
	sb.size = 0;
	ck_assert_int_eq(wire_put_reserve(&sb, WIRE_FORGET, 12, exec), 0);
	ck_assert_int_eq(wire_decode(sb.data, sb.size, 1, &m), 0);
	ck_assert_int_eq(m.type, WIRE_FORGET);
	ck_assert_uint_eq(m.u.reserve.entry, 12);
	ck_assert_mem_eq(m.u.reserve.exec, exec, 16);
	ck_assert_int_eq(wire_decode(sb.data, sb.size, 0, &m), CARMY_EPROTOCOL);
	sb.size = 0;
	ck_assert_int_eq(wire_put_reply(&sb, WIRE_FORGET, -EBUSY), 0);
	ck_assert_int_eq(wire_decode(sb.data, sb.size, 0, &m), 0);
	ck_assert_int_eq(m.type, WIRE_FORGET);
	ck_assert_int_eq(m.u.reply.code, -EBUSY);
	ck_assert_int_eq(wire_decode(sb.data, sb.size, 1, &m), CARMY_EPROTOCOL);

	sb.size = 0;
	ck_assert_int_eq(wire_put_reply(&sb, WIRE_RESERVE, CARMY_ESTORE), 0);
	ck_assert_int_eq(wire_decode(sb.data, sb.size, 0, &m), 0);
	ck_assert_int_eq(m.type, WIRE_RESERVE);
	ck_assert_int_eq(m.u.reply.code, CARMY_ESTORE);

	ck_assert(!m.u.reply.taken);

	/* A shared store's answer: who holds the identity. */
	sb.size = 0;
	ck_assert_int_eq(wire_put_taken(&sb, CARMY_EUNCERTAIN, exec,
					CARMY_STATE_RUNNING), 0);
	ck_assert_int_eq(wire_decode(sb.data, sb.size, 0, &m), 0);
	ck_assert_int_eq(m.type, WIRE_RESERVE);
	ck_assert_int_eq(m.u.reply.code, CARMY_EUNCERTAIN);
	ck_assert(m.u.reply.taken);
	ck_assert_mem_eq(m.u.reply.exec, exec, 16);
	ck_assert_uint_eq(m.u.reply.state, CARMY_STATE_RUNNING);
	ck_assert_int_eq(wire_decode(sb.data, sb.size, 1, &m), CARMY_EPROTOCOL);

	sb.size = 0;
	ck_assert_int_eq(wire_put_reply(&sb, WIRE_ERROR, CARMY_ELAYOUT), 0);
	ck_assert_int_eq(wire_decode(sb.data, sb.size, 0, &m), 0);
	ck_assert_int_eq(m.type, WIRE_ERROR);
	ck_assert_int_eq(m.u.reply.code, CARMY_ELAYOUT);
	msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(test_wrong_shapes_rejected)
{
	/* [2, 1] from a client: COMPLETE with missing fields. */
	ck_assert_int_eq(wire_decode("\x92\x02\x01", 3, 1, &(struct wire_msg){ 0 }),
			 CARMY_EPROTOCOL);
	/* Not an array. */
	ck_assert_int_eq(wire_decode("\x01", 1, 1, &(struct wire_msg){ 0 }),
			 CARMY_EPROTOCOL);
	/* RESERVE without its exec, with a 15-byte one; RELEASE without
	 * the entry in front of its exec. */
	ck_assert_int_eq(wire_decode("\x92\x04\x01", 3, 1,
				     &(struct wire_msg){ 0 }), CARMY_EPROTOCOL);
	ck_assert_int_eq(wire_decode("\x93\x04\x01\xc4\x0f" "0123456789abcde",
				     20, 1, &(struct wire_msg){ 0 }),
			 CARMY_EPROTOCOL);
	ck_assert_int_eq(wire_decode("\x92\x05\xc4\x10" "0123456789abcdef",
				     20, 1, &(struct wire_msg){ 0 }),
			 CARMY_EPROTOCOL);
	/* FORGET without its entry, with a 15-byte exec, with a negative
	 * entry, or with a field too many. */
	ck_assert_int_eq(wire_decode("\x92\x0a\xc4\x10" "0123456789abcdef",
				     20, 1, &(struct wire_msg){ 0 }),
			 CARMY_EPROTOCOL);
	ck_assert_int_eq(wire_decode("\x93\x0a\x01\xc4\x0f" "0123456789abcde",
				     20, 1, &(struct wire_msg){ 0 }),
			 CARMY_EPROTOCOL);
	ck_assert_int_eq(wire_decode("\x93\x0a\xff\xc4\x10" "0123456789abcdef",
				     21, 1, &(struct wire_msg){ 0 }),
			 CARMY_EPROTOCOL);
	ck_assert_int_eq(wire_decode("\x94\x0a\x01\xc4\x10" "0123456789abcdef"
				     "\x00", 22, 1, &(struct wire_msg){ 0 }),
			 CARMY_EPROTOCOL);
	/* HELLO asking for owner 0 back, or with 4 fields. */
	ck_assert_int_eq(wire_decode("\x95\x01\x02\x03\x00\x01", 6, 1,
				     &(struct wire_msg){ 0 }), CARMY_EPROTOCOL);
	ck_assert_int_eq(wire_decode("\x94\x01\x02\x03\x05", 5, 1,
				     &(struct wire_msg){ 0 }), CARMY_EPROTOCOL);
	/* Unknown type 9. */
	ck_assert_int_eq(wire_decode("\x91\x09", 2, 1, &(struct wire_msg){ 0 }),
			 CARMY_EPROTOCOL);
	/* COMPLETE whose exec is 15 bytes. */
	{
		msgpack_sbuffer sb;
		msgpack_packer pk;
		char exec[15] = { 0 };

		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		msgpack_pack_array(&pk, 6);
		msgpack_pack_uint8(&pk, WIRE_COMPLETE);
		msgpack_pack_uint32(&pk, 1);
		msgpack_pack_bin(&pk, 15);
		msgpack_pack_bin_body(&pk, exec, 15);
		msgpack_pack_int32(&pk, 1);
		msgpack_pack_int32(&pk, 0);
		msgpack_pack_bin(&pk, 0);
		ck_assert_int_eq(wire_decode(sb.data, sb.size, 1,
					     &(struct wire_msg){ 0 }),
				 CARMY_EPROTOCOL);
		msgpack_sbuffer_destroy(&sb);
	}
}
END_TEST

/*
 * Every message is one flat array of a few elements. Anything else is
 * refused before msgpack-c unpacks it, which costs some 24 bytes of heap
 * per element: a long array of nils, a container in a field, array32.
 */
/* The taken form of a RESERVE reply only says who holds an identity: any
 * other code, exec size or state is refused. */
START_TEST(test_taken_reply_shapes)
{
	struct wire_msg m;
#define EXEC16 "\xc4\x10" "0123456789abcdef"
	/* [4, EUNCERTAIN (-1002: 0xd1 0xfc 0x16), exec, 1]: the good one;
	 * ECONFLICT is -1001 (0xfc17), ECAPACITY -1003 (0xfc15). */
	ck_assert_int_eq(CARMY_EUNCERTAIN, -1002);
	ck_assert_int_eq(CARMY_ECONFLICT, -1001);
	ck_assert_int_eq(CARMY_ECAPACITY, -1003);
	ck_assert_int_eq(wire_decode("\x94\x04\xd1\xfc\x16" EXEC16 "\x01", 24,
				     0, &m), 0);
	ck_assert(m.u.reply.taken);
	ck_assert_int_eq(wire_decode("\x94\x04\xd1\xfc\x17" EXEC16 "\x03", 24,
				     0, &m), 0);
	ck_assert_int_eq(m.u.reply.code, CARMY_ECONFLICT);
	ck_assert_uint_eq(m.u.reply.state, CARMY_STATE_INTERRUPTED);
	/* Code 0 (reserved) or an error that names nobody. */
	ck_assert_int_eq(wire_decode("\x94\x04\x00" EXEC16 "\x01", 22, 0, &m),
			 CARMY_EPROTOCOL);
	ck_assert_int_eq(wire_decode("\x94\x04\xd1\xfc\x15" EXEC16 "\x01", 24,
				     0, &m), CARMY_EPROTOCOL);
	/* State NONE, or beyond INTERRUPTED. */
	ck_assert_int_eq(wire_decode("\x94\x04\xd1\xfc\x16" EXEC16 "\x00", 24,
				     0, &m), CARMY_EPROTOCOL);
	ck_assert_int_eq(wire_decode("\x94\x04\xd1\xfc\x16" EXEC16 "\x04", 24,
				     0, &m), CARMY_EPROTOCOL);
	/* An exec of 15 bytes; a string instead of bin; 3 or 5 elements. */
	ck_assert_int_eq(wire_decode("\x94\x04\xd1\xfc\x16\xc4\x0f"
				     "0123456789abcde\x01", 23, 0, &m),
			 CARMY_EPROTOCOL);
	ck_assert_int_eq(wire_decode("\x94\x04\xd1\xfc\x16\xb0"
				     "0123456789abcdef\x01", 23, 0, &m),
			 CARMY_EPROTOCOL);
	ck_assert_int_eq(wire_decode("\x93\x04\xd1\xfc\x16" EXEC16, 23, 0, &m),
			 CARMY_EPROTOCOL);
	ck_assert_int_eq(wire_decode("\x95\x04\xd1\xfc\x16" EXEC16 "\x01\x01",
				     25, 0, &m), CARMY_EPROTOCOL);
	/* Only RESERVE has the form. */
	ck_assert_int_eq(wire_decode("\x94\x02\xd1\xfc\x16" EXEC16 "\x01", 24,
				     0, &m), CARMY_EPROTOCOL);
#undef EXEC16
}
END_TEST

START_TEST(test_only_flat_short_arrays_are_unpacked)
{
	static uint8_t many[3 + 1000];
	struct wire_msg m;

	many[0] = 0xdc;			/* array16 of 1000 nils */
	many[1] = 1000 >> 8;
	many[2] = 1000 & 0xff;
	memset(many + 3, 0xc0, 1000);
	ck_assert_int_eq(wire_scan(many, sizeof(many), sizeof(many)),
			 (long)sizeof(many));	/* well-formed */
	ck_assert_int_eq(wire_decode(many, sizeof(many), 1, &m),
			 CARMY_EPROTOCOL);
	/* [1, [2], 3] from a client, and from carmyd */
	ck_assert_int_eq(wire_decode("\x93\x01\x91\x02\x03", 5, 1, &m),
			 CARMY_EPROTOCOL);
	ck_assert_int_eq(wire_decode("\x93\x01\x91\x02\x03", 5, 0, &m),
			 CARMY_EPROTOCOL);
	/* a map in a field */
	ck_assert_int_eq(wire_decode("\x92\x03\x80", 3, 1, &m),
			 CARMY_EPROTOCOL);
	/* [3] (RECLAIM) as array32 */
	ck_assert_int_eq(wire_decode("\xdd\x00\x00\x00\x01\x03", 6, 1, &m),
			 CARMY_EPROTOCOL);
	/* ... which, as a fixarray, is a message */
	ck_assert_int_eq(wire_decode("\x91\x03", 2, 1, &m), 0);
	ck_assert_int_eq(m.type, WIRE_RECLAIM);
}
END_TEST

START_TEST(test_random_bytes_never_crash_the_scanner)
{
	unsigned seed = 11;
	uint8_t buf[256];

	for (int i = 0; i < 200000; i++) {
		size_t n = (size_t)rand_r(&seed) % sizeof(buf);
		long r;

		for (size_t j = 0; j < n; j++)
			buf[j] = (uint8_t)rand_r(&seed);
		r = wire_scan(buf, n, sizeof(buf));
		ck_assert(r == CARMY_EPROTOCOL || (r >= 0 && (size_t)r <= n));
		if (r > 0) {
			struct wire_msg m;

			(void)wire_decode(buf, (size_t)r, (int)(i & 1), &m);
		}
	}
}
END_TEST

/*
 * Bytes arriving one at a time: the resumed scanner must say, after every
 * byte, exactly what a scan of everything so far from the start says (need
 * more, the message's length, or PROTOCOL_ERROR), with containers, strings
 * and a cap small enough to be hit. Inputs are drawn from bytes that make
 * nested messages likely, so whole messages and refusals both occur.
 */
START_TEST(test_resumed_scan_agrees_byte_by_byte)
{
	static const uint8_t alphabet[] = {
		0x91, 0x92, 0x93, 0x81, 0x82, 0x90, 0x80, 0xa1, 0xa3, 'x',
		0x01, 0x7f, 0xc0, 0xc3, 0xcc, 0xcd, 0xdc, 0xde, 0x00, 0x02,
		0xc4, 0xd9, 0x03, 0xd4, 0xc7, 0xc1, 0xdd, 0xff,
	};
	const size_t cap = 96;
	unsigned seed = 5;
	int whole = 0, refused = 0;

	for (int i = 0; i < 20000; i++) {
		struct wire_scanner sc = { 0 };
		uint8_t buf[128];
		size_t n = 1 + (size_t)rand_r(&seed) % sizeof(buf);
		long got = 0, want = 0;

		for (size_t j = 0; j < n; j++)
			buf[j] = alphabet[(size_t)rand_r(&seed) %
					  sizeof(alphabet)];
		for (size_t k = 1; k <= n; k++) {
			got = wire_scan_more(&sc, buf, k, cap);
			want = wire_scan(buf, k, cap);
			ck_assert_msg(got == want, "input %d, %zu bytes: "
				      "resumed %ld, from scratch %ld", i, k,
				      got, want);
			if (got != 0)
				break;
		}
		whole += got > 0;
		refused += got < 0;
	}
	ck_assert_int_gt(whole, 1000);
	ck_assert_int_gt(refused, 1000);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("wire");
	TCase *tc = tcase_create("wire");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_whole_message_length_and_partial_need_more);
	tcase_add_test(tc, test_taken_reply_shapes);
	tcase_add_test(tc, test_hostile_container_headers_rejected_without_allocation);
	tcase_add_test(tc, test_nesting_beyond_limit_rejected);
	tcase_add_test(tc, test_message_beyond_cap_rejected);
	tcase_add_test(tc, test_every_message_round_trips);
	tcase_add_test(tc, test_wrong_shapes_rejected);
	tcase_add_test(tc, test_only_flat_short_arrays_are_unpacked);
	tcase_add_test(tc, test_random_bytes_never_crash_the_scanner);
	tcase_add_test(tc, test_resumed_scan_agrees_byte_by_byte);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0;
}
