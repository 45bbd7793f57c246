/*
 * The seam between the watchdog's own profiler (plugin.c) and the chaining of a second
 * profiler plugin beside it (chain.c). Nothing here is exported from the library: it is built
 * with -fvisibility=hidden, and only the four ncclProfiler_vN tables leave it.
 */
#ifndef NCCLWATCH_PROFILER_INTERNAL_H
#define NCCLWATCH_PROFILER_INTERNAL_H

#include <sched.h>
#include <stdint.h>
#include <sys/types.h>

#include "abi.h"
#include "region.h"

/* One event, whatever ABI version delivered it. */
struct nw_ev {
  uint64_t type;
  void *parent; /* the parentObj NCCL passed, or the plan's Group handle for Coll/P2p */
  int rank;
  uint64_t nccl_seq, count, comm_hash, timer;
  const char *func, *dtype, *algo, *proto;
  int root_or_peer, nch, pid, channel, nsteps, is_send, step;
  int has_comm_hash;
};

static inline void nw_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* A lock for a few dozen instructions between NCCL's threads (its user thread, its proxy
 * thread and, from 2.29, its profiler thread): spinning is cheaper than any sleep.
 * sched_yield only covers a holder that was preempted. */
static inline void spin_lock(int *l) {
  unsigned n = 0;
  while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE)) {
    while (__atomic_load_n(l, __ATOMIC_RELAXED)) {
      if (++n < 256) {
        nw_cpu_relax();
      } else {
        sched_yield();
        n = 0;
      }
    }
  }
}
static inline void spin_unlock(int *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }

/* ---- the watchdog's own profiler (plugin.c) --------------------------------------------- */

/* init of ABI version abi (3-6); v3 passes id 0 and -1 for the rest. */
nw_result_t nw_ours_init(unsigned abi, void **ctx, int *mask, uint64_t id, int nnodes, int nranks, int rank,
                         nw_logger_t logfn);
/* NCCL's descriptor of version abi, read into an event; returns 0 for a NULL descriptor. */
int nw_ours_ev(unsigned abi, const void *descr, struct nw_ev *ev);
void *nw_ours_start(void *ctx, const struct nw_ev *ev);
nw_result_t nw_ours_stop(void *h);
/* timer: the KernelChStop state's GPU time (v4+), else 0. */
nw_result_t nw_ours_state(void *h, int state, uint64_t timer);
nw_result_t nw_ours_finalize(void *ctx);
/* The event types the watchdog asked NCCL for (0 before the first init or when off). */
int nw_ours_mask(void);
/* The region's header, NULL when there is none (recording off). */
struct nw_hdr *nw_ours_header(void);
/* The pid whose region this is (a forked child gets its own). */
pid_t nw_ours_pid(void);
/* Says a line through NCCL's logger (v4+), else on stderr; init and finalize only. */
void nw_ours_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- a second profiler plugin chained beside it (chain.c) ------------------------------- */

/* Set once NCCLWATCH_PROFILER_CHAIN named a plugin that loaded: from then on every context
 * and handle NCCL holds is a pair (the watchdog's and the chained plugin's), and every entry
 * point goes through nw_chain_*. Never cleared. */
extern int nw_chained;

/* The init of every table: loads the chained plugin at the first call, then initialises the
 * watchdog's profiler and, when chained, the other one. */
nw_result_t nw_chain_init(unsigned abi, void **ctx, int *mask, uint64_t id, const char *name, int nnodes,
                          int nranks, int rank, nw_logger_t logfn);
nw_result_t nw_chain_start(unsigned abi, void *ctx, void **h, void *descr);
nw_result_t nw_chain_stop(void *h);
nw_result_t nw_chain_state(unsigned abi, void *h, int state, void *args);
nw_result_t nw_chain_finalize(void *ctx);

#endif
