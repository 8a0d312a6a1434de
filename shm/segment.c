/*
 * segment.c - geometry, layout signature and the one sanity check.
 *
 * Every number that locates something in the segment is derived here from
 * (capacity, max_result). A process that attaches recomputes the geometry
 * from the header's two inputs and insists that every stored offset and size
 * agree, so a mismatched or scribbled header is refused before any index from
 * it is used.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <xxhash.h>

#include "shm/shm.h"

_Static_assert(sizeof(struct shm_header) == SHM_HEADER_SIZE,
	       "header must be exactly SHM_HEADER_SIZE");
_Static_assert(sizeof(struct shm_entry) % 64 == 0,
	       "entries are cache-line aligned");
_Static_assert(sizeof(struct shm_call) == 384, "a call is six lines");
_Static_assert(sizeof(struct shm_stats) == 64, "one stats stripe per line");
_Static_assert(sizeof(struct shm_ack_slot) == 64, "one ack slot per line");
_Static_assert(sizeof(struct shm_bell) == 64, "one bell per line");

#define ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((uint64_t)(a) - 1))

/*
 * The layout signature: a hash of the format version and of every size and
 * offset that two builds must agree on to share a segment. A change to any
 * of them changes the signature, and attach fails with CARMY_ELAYOUT.
 */
uint64_t shm_layout_signature(void)
{
	const uint64_t facts[] = {
		SHM_FORMAT,
		sizeof(struct shm_header),
		offsetof(struct shm_header, sh_seed),
		offsetof(struct shm_header, sh_epoch),
		offsetof(struct shm_header, sh_next_owner),
		sizeof(struct shm_entry),
		offsetof(struct shm_entry, en_fingerprint),
		offsetof(struct shm_entry, en_rawprint),
		offsetof(struct shm_entry, en_exec),
		offsetof(struct shm_entry, en_ident),
		offsetof(struct shm_entry, en_resolved_ns),
		offsetof(struct shm_entry, en_pending),
		SHM_ACK_SLOTS,
		sizeof(struct shm_ack_slot),
		offsetof(struct shm_ack_slot, ak_post),
		offsetof(struct shm_ack_slot, ak_type),
		offsetof(struct shm_ack_slot, ak_entry),
		offsetof(struct shm_ack_slot, ak_exec),
		offsetof(struct shm_ack_slot, ak_sum),
		offsetof(struct shm_bell, bl_awake),
		SHM_BELLS,
		sizeof(struct shm_bell),
		offsetof(struct shm_header, sh_tombs),
		offsetof(struct shm_header, sh_move_seq),
		offsetof(struct shm_header, sh_alive),
		sizeof(((struct shm_header *)0)->sh_alive),
		FUTEX_OWNER_DIED,	/* what the kernel marks it with */
		offsetof(struct shm_header, sh_loaded),
		offsetof(struct shm_header, sh_store),
		offsetof(struct shm_header, sh_calls_off),
		sizeof(struct shm_call),
		offsetof(struct shm_call, cl_tool_len),
		offsetof(struct shm_call, cl_format),
		offsetof(struct shm_call, cl_data),
		SHM_TOOL_KEEP,
		SHM_ARGS_KEEP,
		CARMY_ID_MAX,
		SHM_OWNER_MIN,
		SHM_TICKET_ORPHAN,
		sizeof(uint64_t) * 2,	/* ticket words are 64-bit */
		shm_word(SHM_BLOCKED, 1, 1, 1),	/* bucket word packing */
		sizeof(uint64_t),
		SHM_STATS_STRIPES,
		sizeof(struct shm_stats),
	};

	return XXH3_64bits(facts, sizeof(facts));
}

/* Derive the whole geometry. Returns 0 or -EINVAL if the inputs are out of
 * range or the segment would not fit in a size_t. */
int shm_geometry(uint32_t capacity, uint32_t max_result,
		 struct shm_geometry *geo)
{
	uint64_t nb;

	if (capacity == 0 || capacity > SHM_CAPACITY_MAX ||
	    max_result > SHM_MAX_RESULT_MAX)
		return -EINVAL;

	/* At least twice the capacity, so the index stays at most half full
	 * of live entries and probe runs stay short. */
	nb = 64;
	while (nb < 2 * (uint64_t)capacity)
		nb <<= 1;

	geo->capacity = capacity;
	geo->nbuckets = (uint32_t)nb;
	geo->max_result = max_result;
	geo->result_stride = (uint32_t)ALIGN_UP((uint64_t)max_result, 64);
	geo->tickets_off = SHM_HEADER_SIZE +
			   SHM_STATS_STRIPES * sizeof(struct shm_stats) +
			   SHM_ACK_SLOTS * sizeof(struct shm_ack_slot) +
			   SHM_BELLS * sizeof(struct shm_bell);
	geo->buckets_off = ALIGN_UP(geo->tickets_off +
				    (uint64_t)capacity * sizeof(uint64_t), 64);
	geo->entries_off = ALIGN_UP(geo->buckets_off + nb * sizeof(uint64_t),
				    4096);
	geo->calls_off = ALIGN_UP(geo->entries_off + (uint64_t)capacity *
				  sizeof(struct shm_entry), 4096);
	geo->results_off = ALIGN_UP(geo->calls_off + (uint64_t)capacity *
				    sizeof(struct shm_call), 4096);
	geo->size = ALIGN_UP(geo->results_off +
			     (uint64_t)capacity * geo->result_stride, 4096);
	if (geo->size > SIZE_MAX / 2)
		return -EINVAL;
	return 0;
}

/* Write the header's fixed part (magic, layout, geometry, seed) into memory
 * of geo->size bytes, zeroed when new. Zero is FREE for both tickets and
 * buckets, so nothing else needs initialising; the sh_ fields carmyd updates
 * while running are left alone. */
void shm_format(void *base, const struct shm_geometry *geo, uint64_t seed,
		uint64_t now_ns)
{
	struct shm_header *h = base;

	h->sh_layout = shm_layout_signature();
	h->sh_size = geo->size;
	h->sh_capacity = geo->capacity;
	h->sh_nbuckets = geo->nbuckets;
	h->sh_max_result = geo->max_result;
	h->sh_result_stride = geo->result_stride;
	h->sh_tickets_off = geo->tickets_off;
	h->sh_buckets_off = geo->buckets_off;
	h->sh_entries_off = geo->entries_off;
	h->sh_calls_off = geo->calls_off;
	h->sh_results_off = geo->results_off;
	h->sh_seed = seed;
	h->sh_created_ns = now_ns;
	/* The magic goes last: a segment is recognisable only when whole. */
	__atomic_store_n(&h->sh_magic, SHM_MAGIC, __ATOMIC_RELEASE);
}

/*
 * The one sanity check, run on every attach and before every carmyd scan.
 * Each header field is read once into a local, and the geometry is
 * recomputed from capacity and max_result; every stored value must match it
 * and the whole must fit in the mapped bytes. On success *geo is the
 * validated geometry, which the caller keeps privately from then on.
 * Returns 0, CARMY_ELAYOUT for another build's segment, or CARMY_ECORRUPT.
 */
int shm_sane(const void *base, size_t mapped, struct shm_geometry *geo)
{
	const volatile struct shm_header *h = base;
	struct shm_geometry want;

	if (mapped < sizeof(struct shm_header))
		return CARMY_ECORRUPT;
	if (h->sh_magic != SHM_MAGIC)
		return CARMY_ECORRUPT;
	if (h->sh_layout != shm_layout_signature())
		return CARMY_ELAYOUT;
	if (shm_geometry(h->sh_capacity, h->sh_max_result, &want) != 0)
		return CARMY_ECORRUPT;
	if (h->sh_nbuckets != want.nbuckets ||
	    h->sh_result_stride != want.result_stride ||
	    h->sh_tickets_off != want.tickets_off ||
	    h->sh_buckets_off != want.buckets_off ||
	    h->sh_entries_off != want.entries_off ||
	    h->sh_calls_off != want.calls_off ||
	    h->sh_results_off != want.results_off ||
	    h->sh_size != want.size || want.size > mapped)
		return CARMY_ECORRUPT;
	*geo = want;
	return 0;
}

/* Check a mapping and fill a view from the validated geometry. */
int shm_view_init(struct shm_view *v, void *base, size_t mapped)
{
	struct shm_geometry geo;
	int rc = shm_sane(base, mapped, &geo);

	if (rc != 0)
		return rc;
	memset(v, 0, sizeof(*v));
	v->base = base;
	v->mapped = mapped;
	v->geo = geo;
	v->seed = ((const volatile struct shm_header *)base)->sh_seed;
	v->stats = (struct shm_stats *)(v->base + SHM_HEADER_SIZE);
	v->acks = (struct shm_ack_slot *)(v->base + SHM_HEADER_SIZE +
					  SHM_STATS_STRIPES *
						  sizeof(struct shm_stats));
	v->bells = (struct shm_bell *)((uint8_t *)v->acks +
				       SHM_ACK_SLOTS *
					       sizeof(struct shm_ack_slot));
	v->tickets = (uint64_t *)(v->base + geo.tickets_off);
	v->buckets = (uint64_t *)(v->base + geo.buckets_off);
	v->entries = (struct shm_entry *)(v->base + geo.entries_off);
	v->calls = (struct shm_call *)(v->base + geo.calls_off);
	v->results = v->base + geo.results_off;
	return 0;
}

/* Map an existing segment by name and check it. Returns 0, -errno from
 * shm_open/mmap, CARMY_ELAYOUT or CARMY_ECORRUPT. */
int shm_map(const char *name, bool writable, struct shm_view *v)
{
	return shm_map_vetted(name, writable, NULL, NULL, v);
}

/*
 * Map size bytes of the segment's file fd, shared, on a 2 MiB boundary:
 * a huge page of the file can then be mapped whole, by one page-table
 * entry, in this process. The kernel places a mapping so only where
 * /dev/shm is mounted with huge=; elsewhere its pages are 4 KiB as they
 * are allocated, and a boundary is what lets carmyd's MADV_COLLAPSE make
 * them huge and every process map them so (docs/segment.md, Huge pages).
 * Address space for size + 2 MiB is taken first and what lies outside
 * the mapping given back; where that cannot be done the kernel places the
 * mapping. Returns the mapping, or MAP_FAILED with errno.
 */
#define SHM_HUGE_ALIGN ((uintptr_t)2 << 20)

void *shm_mmap(int fd, size_t size, bool writable)
{
	const int prot = PROT_READ | (writable ? PROT_WRITE : 0);
	const size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint8_t *room, *at, *end, *base;
	size_t whole, len;

	/* The mapping covers whole pages: the tail to give back starts at
	 * the page after the last byte of the file mapped. */
	if (size == 0 || page == 0 || (page & (page - 1)) != 0 ||
	    size > SIZE_MAX - SHM_HUGE_ALIGN - page)
		return mmap(NULL, size, prot, MAP_SHARED, fd, 0);
	whole = (size + page - 1) & ~(page - 1);
	len = whole + SHM_HUGE_ALIGN;
	room = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS |
		    MAP_NORESERVE, -1, 0);
	if (room == MAP_FAILED)
		return mmap(NULL, size, prot, MAP_SHARED, fd, 0);
	at = (uint8_t *)(((uintptr_t)room + SHM_HUGE_ALIGN - 1) &
			 ~(SHM_HUGE_ALIGN - 1));
	base = mmap(at, size, prot, MAP_SHARED | MAP_FIXED, fd, 0);
	if (base == MAP_FAILED) {
		/* Splitting the room takes map entries (vm.max_map_count):
		 * let the kernel place it instead. */
		munmap(room, len);
		return mmap(NULL, size, prot, MAP_SHARED, fd, 0);
	}
	end = at + whole;
	if (at > room)
		munmap(room, (size_t)(at - room));
	if (room + len > end)
		munmap(end, (size_t)(room + len - end));
	return base;
}

/*
 * shm_map(), with vet (if not NULL) asked about the file first: its fstat()
 * on the very descriptor that is then mapped, so a name swapped after the
 * look cannot be the one mapped; any code it returns is returned. A vetted
 * segment is also the exact size its header says. (shm_open() opens with
 * O_NOFOLLOW: /dev/shm's names are never followed as links.)
 */
int shm_map_vetted(const char *name, bool writable,
		   int (*vet)(const struct stat *st, void *arg), void *arg,
		   struct shm_view *v)
{
	struct stat st;
	void *base;
	int fd, rc;

	fd = shm_open(name, (writable ? O_RDWR : O_RDONLY) | O_NONBLOCK |
		      O_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	rc = vet != NULL ? vet(&st, arg) : 0;
	if (rc != 0) {
		close(fd);
		return rc;
	}
	if (st.st_size < (off_t)sizeof(struct shm_header)) {
		close(fd);
		return CARMY_ECORRUPT;
	}
	base = shm_mmap(fd, (size_t)st.st_size, writable);
	rc = -errno;
	close(fd);
	if (base == MAP_FAILED)
		return rc;
	rc = shm_view_init(v, base, (size_t)st.st_size);
	if (rc == 0 && vet != NULL && v->geo.size != (uint64_t)st.st_size)
		rc = CARMY_ECORRUPT;
	if (rc != 0)
		munmap(base, (size_t)st.st_size);
	return rc;
}

void shm_unmap(struct shm_view *v)
{
	if (v->base != NULL)
		munmap(v->base, v->mapped);
	v->base = NULL;
}

/*
 * The keeper: registers sh_alive as the one entry of its robust futex list,
 * says so, and waits to be let go. The list head and entry are on its own
 * stack, valid for as long as the thread lives; the entry reaches the word
 * through futex_offset, so no pointer goes into the segment. glibc
 * registered a list of its own for this thread; it is set aside (and put
 * back before the thread ends), so the keeper must never take a glibc
 * robust mutex, and takes only the plain a->mu.
 */
static void *keeper(void *arg)
{
	struct shm_alive *a = arg;
	struct robust_list_head head, *glibc = NULL;
	struct robust_list entry;
	size_t glibc_len = 0;
	int rc = 0;

	entry.next = &head.list;
	head.list.next = &entry;
	head.futex_offset = (long)((uintptr_t)a->word - (uintptr_t)&entry);
	head.list_op_pending = NULL;
	if (syscall(SYS_get_robust_list, 0, &glibc, &glibc_len) != 0 ||
	    syscall(SYS_set_robust_list, &head, sizeof(head)) != 0)
		rc = errno != 0 ? -errno : -ENOSYS;
	pthread_mutex_lock(&a->mu);
	if (rc == 0) {
		a->tid = (uint32_t)syscall(SYS_gettid);
		a->state = 1;
	} else {
		a->state = rc;
	}
	pthread_cond_broadcast(&a->cv);
	while (rc == 0 && a->state != 2)
		pthread_cond_wait(&a->cv, &a->mu);
	pthread_mutex_unlock(&a->mu);
	if (rc == 0) {
		/* What the kernel would leave if we died holding it. */
		__atomic_store_n(a->word, FUTEX_OWNER_DIED, __ATOMIC_RELEASE);
		syscall(SYS_set_robust_list, glibc, glibc_len);
	}
	return NULL;
}

/*
 * Hold sh_alive from now until this process exits, however it exits (or
 * until shm_let_go_alive): start a keeper thread, then write its thread id
 * into the word. The store releases everything the caller wrote into the
 * segment before, so a client that reads "alive" sees it all. Whatever a
 * previous holder left there (FUTEX_OWNER_DIED, or noise) is overwritten.
 * Returns 0 or a -errno (-ENOSYS: no robust futexes here).
 */
int shm_hold_alive(struct shm_alive *a, const struct shm_view *v)
{
	sigset_t all, old;
	int rc;

	memset(a, 0, sizeof(*a));
	a->word = &shm_header(v)->sh_alive;
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	/* Signals are for the holder's other threads (carmyd reads its own
	 * from a signalfd): the keeper starts with every one blocked. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = -pthread_create(&a->thread, NULL, keeper, a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc == 0) {
		pthread_mutex_lock(&a->mu);
		while (a->state == 0)
			pthread_cond_wait(&a->cv, &a->mu);
		rc = a->state < 0 ? a->state : 0;
		pthread_mutex_unlock(&a->mu);
		if (rc != 0)
			pthread_join(a->thread, NULL);
	}
	if (rc != 0) {
		pthread_cond_destroy(&a->cv);
		pthread_mutex_destroy(&a->mu);
		return rc;
	}
	__atomic_store_n(a->word, a->tid, __ATOMIC_RELEASE);
	return 0;
}

/*
 * carmyd's check: the word must hold the keeper's thread id and nothing
 * else. Anything else is a client's write (carmyd alone writes it while it
 * runs): put the id back, and return true with what was there in *was.
 */
bool shm_restore_alive(const struct shm_alive *a, uint32_t *was)
{
	uint32_t w = __atomic_load_n(a->word, __ATOMIC_RELAXED);

	if (w == a->tid)
		return false;
	*was = w;
	__atomic_store_n(a->word, a->tid, __ATOMIC_RELEASE);
	return true;
}

/* Let go of sh_alive: it reads FUTEX_OWNER_DIED, "no carmyd", from here on,
 * and the keeper is gone. Call it before the segment is unmapped. */
void shm_let_go_alive(struct shm_alive *a)
{
	pthread_mutex_lock(&a->mu);
	a->state = 2;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
	pthread_join(a->thread, NULL);
	pthread_cond_destroy(&a->cv);
	pthread_mutex_destroy(&a->mu);
}
