/*
 * atomic.h - the atomic operations the segment protocol uses.
 *
 * What ships is liburcu's uatomic/cmm, for x86-64 (as in liburcu 0.13). Its
 * primitives are inline assembly and volatile accesses, which
 * ThreadSanitizer cannot see: it would report every publish-then-read of
 * an entry as a race. Under -fsanitize=thread (gcc's __SANITIZE_THREAD__,
 * clang's __has_feature(thread_sanitizer)) or with CARMY_ATOMIC_BUILTINS
 * (the fuzzers define it, so that ASan sees every CAS as a memory access)
 * the same names map to the compiler's __atomic builtins instead.
 *
 * Each primitive, as shipped on x86-64 and as mapped to builtins:
 *
 *   shm_load(p)    shipped: a compiler barrier, then a volatile load. The
 *                  CPU (x86 TSO) keeps it ordered before every later load
 *                  and store; the compiler does not (nothing after it is
 *                  pinned). Builtins: an acquire load.
 *   shm_store(p,v) shipped: a volatile store, then a compiler barrier.
 *                  The CPU keeps it after every earlier load and store
 *                  (a release, at the hardware level) but may let a later
 *                  load pass it (the store buffer); the compiler may sink
 *                  earlier plain stores below it. Builtins: a seq_cst
 *                  store.
 *   shm_cas(p,o,n) compare *p with o and, if equal, write n. Returns the
 *                  value *p held, which equals o exactly when it
 *                  succeeded. Shipped: lock cmpxchg with a memory clobber,
 *                  a full barrier for CPU and compiler whether it succeeds
 *                  or fails. A failed one writes nothing new: the locked
 *                  instruction writes back the value it found, unchanged,
 *                  and returns it. Builtins: seq_cst on success and on
 *                  failure, where it is a seq_cst load only; the value
 *                  found is written back into a local, not into *p, and
 *                  returned. So what both promise of a failed shm_cas() is
 *                  that *p is unchanged and the value returned was read
 *                  with (at least) acquire ordering; the full barrier of
 *                  x86 is not promised.
 *   shm_add_return(p,v)  shipped: lock xadd, a full barrier; returns the
 *                  new value. Builtins: seq_cst add-fetch. The same.
 *   shm_xchg(p,v)  shipped: xchg (locked), a full barrier; returns the old
 *                  value. Builtins: seq_cst exchange. The same.
 *   shm_rmb()      shipped: cmm_smp_rmb(), a compiler barrier only (x86
 *                  keeps loads in order). Builtins: an acquire fence.
 *   shm_mb()       shipped: cmm_smp_mb(), mfence. Builtins: a seq_cst
 *                  fence. The same.
 *
 * Where they differ, and why: shm_load() and shm_store() are stronger as
 * builtins (acquire and seq_cst) than liburcu's volatile accesses, and
 * shm_rmb() is a real fence there. TSan checks happens-before, and sees an
 * edge only through an atomic it knows of: a relaxed load after a
 * publishing CAS would be reported as a race although x86 orders it. The
 * price is that a TSan run cannot catch code that leans on the stronger
 * builtins: code that needs more than x86's ordering of a volatile access
 * (a store then a load of another word, or the compiler kept from moving
 * plain accesses across a load or store) must say so with shm_rmb(),
 * shm_mb() or a locked operation, which mean the same in both mappings.
 * On another architecture liburcu's own uatomic and cmm barriers apply
 * (its cmm_smp_rmb() is then a real fence).
 */
#ifndef CARMY_SHM_ATOMIC_H
#define CARMY_SHM_ATOMIC_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <urcu/arch.h>
#include <urcu/uatomic.h>

#if !defined(CARMY_ATOMIC_BUILTINS) && defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CARMY_ATOMIC_BUILTINS 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) && !defined(CARMY_ATOMIC_BUILTINS)
#define CARMY_ATOMIC_BUILTINS 1
#endif

#if defined(CARMY_ATOMIC_BUILTINS)
#define shm_load(p)		__atomic_load_n((p), __ATOMIC_ACQUIRE)
#define shm_store(p, v)		__atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define shm_cas(p, old, new)						\
	__extension__({							\
		__typeof__(*(p)) shm_cas_old_ = (old);			\
		__atomic_compare_exchange_n((p), &shm_cas_old_, (new), 0,	\
					    __ATOMIC_SEQ_CST,		\
					    __ATOMIC_SEQ_CST);		\
		shm_cas_old_;						\
	})
#define shm_add_return(p, v)	__atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)
#define shm_xchg(p, v)		__atomic_exchange_n((p), (v), __ATOMIC_SEQ_CST)
#define shm_rmb()		__atomic_thread_fence(__ATOMIC_ACQUIRE)
#define shm_mb()		__atomic_thread_fence(__ATOMIC_SEQ_CST)
#else
#define shm_load(p)		uatomic_read(p)
#define shm_store(p, v)		uatomic_set((p), (v))
#define shm_cas(p, old, new)	uatomic_cmpxchg((p), (old), (new))
#define shm_add_return(p, v)	uatomic_add_return((p), (v))
#define shm_xchg(p, v)		uatomic_xchg((p), (v))
#define shm_rmb()		cmm_smp_rmb()
#define shm_mb()		cmm_smp_mb()
#endif

#define shm_cpu_relax()		caa_cpu_relax()

/*
 * One turn of a wait for carmyd to finish a move or a reclaim (an odd move
 * sequence, a BLOCKED bucket): microseconds, unless carmyd's thread was
 * preempted, and on a busy machine the waiters spinning may be what keeps
 * it from running. So a turn pauses, every SHM_BUSY_TURNS-th one sleeps
 * SHM_BUSY_NAP_NS (a sched_yield() gives the CPU to whichever task the
 * scheduler likes, which need not be carmyd's) and looks at the clock, and
 * the wait ends (false) once it has lasted SHM_BUSY_NS: only a carmyd
 * killed in the middle holds it that long. *spins and *since start at 0.
 */
#define SHM_BUSY_TURNS 1024u
#define SHM_BUSY_NAP_NS 50000L
#define SHM_BUSY_NS 2000000000ull
static inline bool shm_busy_turn(unsigned *spins, uint64_t *since)
{
	struct timespec ts;
	uint64_t now;

	if (++*spins % SHM_BUSY_TURNS != 0) {
		shm_cpu_relax();
		return true;
	}
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	if (*since == 0)
		*since = now;
	else if (now - *since >= SHM_BUSY_NS)
		return false;
	ts.tv_sec = 0;
	ts.tv_nsec = SHM_BUSY_NAP_NS;
	nanosleep(&ts, NULL);
	return true;
}

#endif /* CARMY_SHM_ATOMIC_H */
