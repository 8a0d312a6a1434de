/*
 * carmy-stall - how long the longest calls to a running carmyd take.
 *
 *   carmy-stall [--socket PATH] [--seconds S] [--release] [--over MS]
 *
 * One client makes calls back to back for S seconds (default 5): each
 * carmy_begin() of a new identity, then carmy_complete() of it, or with
 * --release carmy_release() (each leaves a tombstone in carmyd's index for
 * it to reclaim). It prints how many calls were made, the longest, and how
 * many took longer than 0.1, 1 and 5 ms; with --over MS, each call longer
 * than MS milliseconds too, with when it started. A table that fills up
 * (IDEMPOTENCY_CAPACITY) ends the run early, said on its line; the refused
 * call is timed with the others, not counted among the calls. A call held
 * up longer
 * than a few microseconds waited for carmyd's event loop: work the loop
 * did meanwhile (its tick's walks of the table), or another process on
 * the CPUs. carmy-bench's figures are medians and p99s; this is the tail
 * they leave out. Exit status: 0, or 1 when a call failed (said on
 * stderr).
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "carmy.h"

struct stall_opts {
	const char *socket;
	double seconds;
	bool release;
	double over_ms;		/* < 0: no list of calls */
};

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void usage(FILE *out)
{
	fputs("usage: carmy-stall [--socket PATH] [--seconds S] [--release] "
	      "[--over MS]\n"
	      "  One client's calls back to back for S seconds (default 5): "
	      "a new identity\n"
	      "  reserved, then completed (or, with --release, released). "
	      "Prints the calls,\n"
	      "  the longest and how many took over 0.1, 1 and 5 ms; with "
	      "--over MS, each\n"
	      "  call over MS ms and when it started.\n", out);
}

/* A positive number of at most max from s, or -1. */
static double positive(const char *s, double max)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !(v > 0) || v > max)
		return -1;
	return v;
}

static int parse(int argc, char **argv, struct stall_opts *o)
{
	static const struct option longs[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "seconds", required_argument, NULL, 't' },
		{ "release", no_argument, NULL, 'r' },
		{ "over", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	*o = (struct stall_opts){ .seconds = 5, .over_ms = -1 };
	while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		switch (ch) {
		case 's':
			o->socket = optarg;
			break;
		case 't':
			o->seconds = positive(optarg, 3600);
			if (o->seconds < 0) {
				fprintf(stderr, "carmy-stall: --seconds: expected "
					"a number of seconds above 0 and up to "
					"3600, not '%s'\n", optarg);
				return 2;
			}
			break;
		case 'r':
			o->release = true;
			break;
		case 'o':
			o->over_ms = positive(optarg, 3600000);
			if (o->over_ms < 0) {
				fprintf(stderr, "carmy-stall: --over: expected "
					"milliseconds above 0 and up to "
					"3600000, not '%s'\n", optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "carmy-stall: unexpected argument '%s'\n",
			argv[optind]);
		usage(stderr);
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const char result[] = "ok";
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = {
		.principal = "bench", .principal_len = 5,
		.session = "carmy-stall", .session_len = 11,
		.tool = "bench.stall", .tool_len = 11,
		.args = (const uint8_t *)"\x80", .args_len = 1,	/* {} */
	};
	const uint64_t bounds[] = { 100000, 1000000, 5000000 };
	uint64_t over[3] = { 0 }, calls = 0, longest = 0, start, end, t;
	struct stall_opts o;
	bool full = false;
	char rid[64];
	carmy_t *c;
	int rc;

	rc = parse(argc, argv, &o);
	if (rc != 0)
		return rc;
	rc = carmy_connect(&c, o.socket);
	if (rc != 0) {
		fprintf(stderr, "carmy-stall: cannot connect to carmyd: %s: "
			"%s\n", carmy_errname(rc), carmy_strerror(rc));
		return 1;
	}
	start = now_ns();
	end = start + (uint64_t)(o.seconds * 1e9);
	for (t = start; t < end; calls++) {
		const uint64_t t0 = t;
		uint64_t took;

		call.request_id = rid;
		call.request_id_len = (size_t)snprintf(rid, sizeof(rid),
			"%ld-%llx-%llu", (long)getpid(),
			(unsigned long long)start, (unsigned long long)calls);
		rc = carmy_begin(c, &call, &r);
		if (rc == CARMY_RESERVED)
			rc = o.release ? carmy_release(c, &r) :
					 carmy_complete(c, &r,
							CARMY_STATUS_COMPLETED,
							result,
							sizeof(result) - 1);
		else if (rc >= 0)
			rc = CARMY_EPROTOCOL;	/* a new identity is new */
		carmy_reservation_clear(&r);
		t = now_ns();
		took = t - t0;
		if (rc != 0 && rc != CARMY_ECAPACITY) {
			fprintf(stderr, "carmy-stall: call %llu: %s: %s\n",
				(unsigned long long)calls, carmy_errname(rc),
				carmy_strerror(rc));
			carmy_close(c);
			return 1;
		}
		if (took > longest)
			longest = took;
		for (int k = 0; k < 3; k++)
			over[k] += took > bounds[k];
		if (o.over_ms > 0 && (double)took > o.over_ms * 1e6)
			printf("  at %.3f s: %.1f ms\n",
			       (double)(t0 - start) / 1e9, (double)took / 1e6);
		if (rc == CARMY_ECAPACITY) {
			full = true;	/* what was measured stands */
			break;
		}
	}
	carmy_close(c);
	printf("%s: %llu calls in %.2f s (%.0f a second); the longest %.2f "
	       "ms; over 0.1 ms %llu, over 1 ms %llu, over 5 ms %llu%s\n",
	       o.release ? "reserve+release" : "reserve+complete",
	       (unsigned long long)calls, (double)(t - start) / 1e9,
	       (double)calls * 1e9 / (double)(t - start),
	       (double)longest / 1e6,
	       (unsigned long long)over[0], (unsigned long long)over[1],
	       (unsigned long long)over[2],
	       full ? " (stopped early: carmyd's table is full)" : "");
	return 0;
}
