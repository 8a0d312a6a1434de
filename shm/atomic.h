/*
 * atomic.h - the atomic operations the segment protocol uses.
 *
 * They are liburcu's uatomic/cmm primitives. On x86-64 those are inline
 * assembly (a locked cmpxchg is a full barrier), which ThreadSanitizer
 * cannot see: it would report every publish-then-read of an entry as a
 * race. Under -fsanitize=thread (or with CARMY_ATOMIC_BUILTINS) the same
 * names map to the compiler's __atomic builtins with the orderings the
 * protocol relies on, so TSan checks the real happens-before edges instead
 * of guessing.
 */
#ifndef CARMY_SHM_ATOMIC_H
#define CARMY_SHM_ATOMIC_H

#include <urcu/arch.h>
#include <urcu/uatomic.h>

/* gcc says __SANITIZE_THREAD__, clang __has_feature(thread_sanitizer);
 * CARMY_ATOMIC_BUILTINS asks for the builtins explicitly (the fuzzers use
 * it, so that ASan sees every CAS as a memory access). */
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

#endif /* CARMY_SHM_ATOMIC_H */
