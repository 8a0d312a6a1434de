/*
 * check_cxx.cc - the public headers from C++, as an application or a store
 * plugin written in C++ includes them: carmy.h and carmy_store.h compile
 * without a warning under g++ -std=c++11 -Wall -Wextra -pedantic -Werror
 * (libclient/local.mk), with nothing but the headers' directory on the
 * include path; CARMY_RESERVATION_INIT zeroes a reservation; and
 * libcarmy's functions link with C linkage. Prints TAP.
 */
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "carmy.h"
#include "carmy_store.h"

static int tests_run, tests_failed;

static void ok(bool cond, const char *what)
{
	++tests_run;
	if (!cond)
		++tests_failed;
	std::printf("%sok %d - %s\n", cond ? "" : "not ", tests_run, what);
}

static bool all_zero(const void *p, size_t n)
{
	const unsigned char *b = static_cast<const unsigned char *>(p);

	for (size_t i = 0; i < n; i++)
		if (b[i] != 0)
			return false;
	return true;
}

/* CARMY_RESERVATION_INIT in a declaration, and in a new-expression over
 * bytes that are not zero. */
static void reservation_init_zeroes(void)
{
	alignas(carmy_reservation) unsigned char buf[sizeof(carmy_reservation)];
	carmy_reservation r = CARMY_RESERVATION_INIT;
	carmy_reservation *p;

	ok(r.execution_id[0] == '\0' && r.state == 0 && r.status == 0 &&
		   r.result_code == 0 && r.result == nullptr &&
		   r.result_len == 0 && r.reserved[0] == 0 &&
		   r.reserved[1] == 0,
	   "CARMY_RESERVATION_INIT zeroes a declared reservation");
	std::memset(buf, 0xa5, sizeof(buf));
	p = new (buf) carmy_reservation CARMY_RESERVATION_INIT;
	ok(all_zero(p, sizeof(*p)),
	   "CARMY_RESERVATION_INIT zeroes every byte in a new-expression");
	carmy_reservation_clear(p);
	carmy_reservation_clear(&r);
	ok(all_zero(&r, sizeof(r)), "carmy_reservation_clear links and zeroes");
}

static void version_and_names(void)
{
	int major = -1, minor = -1, patch = -1;
	const char *v = carmy_version(&major, &minor, &patch);

	ok(std::strcmp(v, CARMY_VERSION_STRING) == 0 &&
		   major == CARMY_VERSION_MAJOR &&
		   minor == CARMY_VERSION_MINOR &&
		   patch == CARMY_VERSION_PATCH,
	   "carmy_version is the header's");
	ok(std::strcmp(carmy_errname(CARMY_ECONFLICT),
		       "IDEMPOTENCY_CONFLICT") == 0 &&
		   std::strcmp(carmy_errname(CARMY_EFORKED), "FORKED") == 0,
	   "carmy_errname names Carmy's codes");
	ok(carmy_strerror(CARMY_EUNCERTAIN)[0] != '\0' &&
		   std::strcmp(carmy_status_name(CARMY_STATUS_COMPLETED),
			       "completed") == 0 &&
		   std::strcmp(carmy_state_name(CARMY_STATE_INTERRUPTED),
			       "interrupted") == 0,
	   "carmy_strerror, carmy_status_name and carmy_state_name");
}

/* A call built as C++ code builds it: value-initialised, then filled. */
static void call_from_cxx(void)
{
	static const char principal[] = "user-42";
	carmy_call call = {};

	call.principal = principal;
	call.principal_len = sizeof(principal) - 1;
	ok(call.session == nullptr && call.args_len == 0 &&
		   call.principal_len == 7,
	   "struct carmy_call value-initialises and fills");
	ok(carmy_connect(nullptr, nullptr) == -EINVAL,
	   "carmy_connect links and refuses a NULL out");
}

/* A store plugin written in C++: its table, with C linkage as the ABI
 * wants. Never opened here; carmyd's tests open C plugins. */
static int store_open(const char *, void **store, char *, size_t)
{
	*store = nullptr;
	return 0;
}

static int store_load(void *, carmy_store_each_fn, void *)
{
	return 0;
}

static void store_submit(void *, carmy_store_req *req)
{
	req->done(req, 0);
}

static void store_close(void *)
{
}

extern "C" const carmy_store_ops carmy_store_plugin = {
	CARMY_STORE_ABI, "cxx", store_open, store_load, store_submit,
	store_close, 1, 0,
};

static void store_header(void)
{
	carmy_store_record rec = {};

	rec.state = CARMY_STORE_RUNNING;
	ok(carmy_store_plugin.abi == CARMY_STORE_ABI &&
		   carmy_store_plugin.durable == 1 &&
		   rec.part[0] == nullptr && rec.state == CARMY_STORE_RUNNING,
	   "carmy_store.h: a plugin's table and a record in C++");
}

int main()
{
	std::printf("1..9\n");
	reservation_init_zeroes();
	version_and_names();
	call_from_cxx();
	store_header();
	return tests_failed != 0 || tests_run != 9;
}
