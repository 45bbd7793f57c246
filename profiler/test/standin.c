/*
 * A stand-in for a second profiler plugin (NCCL Inspector, a vendor profiler), for testing
 * the watchdog plugin's chaining (NCCLWATCH_PROFILER_CHAIN, profiler/chain.c): it writes every
 * call it receives to a file and checks what only a plugin can check, that every handle and
 * parent it is given is one of its own, of the right kind, of a communicator still alive.
 *
 * Built as a shared library exporting ncclProfiler_v3 to ncclProfiler_v<STANDIN_MAX> (default
 * 6; -DSTANDIN_MAX=4 plays a plugin older than NCCL) with the name "standin". Environment:
 *   STANDIN_DIR        where standin.<pid>.log goes (default /tmp)
 *   STANDIN_QUIET=1    no line per call, only the summary (long runs, the micro-benchmark)
 *   STANDIN_INIT_FAIL=1  init returns an error (NCCL's ncclInternalError)
 *   STANDIN_MASK=0x..  the activation mask it asks for (default: every event its version knows)
 *
 * Lines (one per call; events are numbered in the order their start arrived, rejected ones
 * included, so a caller that numbers its own starts the same way can compare line by line):
 *   init ctx=C v=V id=0x.. nranks=N rank=R      (v3: id=- nranks=- rank=-)
 *   start ctx=C ev=E type=T parent=P [fields]   P: the parent's event number, - none, x another
 *                                               process's (a proxy op's, not followed); for a
 *                                               Coll or P2p the parent is its Group
 *   stop ev=E [again]
 *   state ev=E st=S
 *   fin ctx=C
 *   summary ...                                 after each finalize and at exit: counts and
 *                                               violations so far (the last one is complete)
 * Events are 0x57A0000000000000 | number << 4; contexts 0x57B0000000000000 | number << 4.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../abi.h"

#ifndef STANDIN_MAX
#define STANDIN_MAX 6
#endif

/* The functions of each version's table: a build with fewer tables leaves some unused. */
#define TABLE_FN static __attribute__((unused))

#define EV_BASE 0x57A0000000000000ULL
#define CTX_BASE 0x57B0000000000000ULL
#define MAX_EV (1u << 21)
#define MAX_CTX 4096u

struct ev {
  uint16_t type; /* event type bit */
  uint16_t ctx;
  uint8_t stopped;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct ev evs[MAX_EV];
static uint8_t ctx_dead[MAX_CTX];
static uint32_t nev, nctx;
static pid_t pid;
static FILE *out;
static int quiet;
static unsigned long long n_start[16], n_stop, n_state, n_rejected, n_again, bad_handle, bad_parent, after_fin,
    overflow, inits, fins;

static const char *type_name(uint64_t t) {
  static const char *names[] = {"Group", "Coll", "P2p", "ProxyOp", "ProxyStep", "ProxyCtrl", "KernelCh",
                                "NetPlugin", "GroupApi", "CollApi", "P2pApi", "KernelLaunch", "CeColl",
                                "CeSync", "CeBatch"};
  for (int i = 0; i < 15; i++)
    if (t == 1ULL << i) return names[i];
  return "unknown";
}

static int type_bit(uint64_t t) {
  for (int i = 0; i < 15; i++)
    if (t == 1ULL << i) return i;
  return 15;
}

/* Under mu. A fork gets a log of its own; its parent's events are not its own. */
static void setup(void) {
  if (out && pid == getpid()) return;
  if (out) fclose(out);
  pid = getpid();
  nev = nctx = 0;
  memset(ctx_dead, 0, sizeof ctx_dead);
  memset(n_start, 0, sizeof n_start);
  n_stop = n_state = n_rejected = n_again = bad_handle = bad_parent = after_fin = overflow = inits = fins = 0;
  const char *dir = getenv("STANDIN_DIR");
  char path[512];
  snprintf(path, sizeof path, "%s/standin.%d.log", dir && *dir ? dir : "/tmp", (int)pid);
  out = fopen(path, "w");
  const char *q = getenv("STANDIN_QUIET");
  quiet = q && !strcmp(q, "1");
}

static void line(const char *fmt, ...) {
  if (quiet || !out) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(out, fmt, ap);
  va_end(ap);
  fputc('\n', out);
}

/* The event number of a handle of ours, -1 if it is none. */
static long ev_of(const void *h) {
  uint64_t v = (uint64_t)(uintptr_t)h;
  if ((v & 0xFFF0000000000000ULL) != EV_BASE || (v & 0xF)) return -1;
  uint64_t i = (v & 0x000FFFFFFFFFFFFFULL) >> 4;
  return i < nev ? (long)i : -1;
}

static long ctx_of(const void *c) {
  uint64_t v = (uint64_t)(uintptr_t)c;
  if ((v & 0xFFF0000000000000ULL) != CTX_BASE || (v & 0xF)) return -1;
  uint64_t i = (v & 0x000FFFFFFFFFFFFFULL) >> 4;
  return i < nctx ? (long)i : -1;
}

static void summary(void) {
  if (!out) return;
  unsigned long long open = 0;
  for (uint32_t i = 0; i < nev; i++) {
    uint16_t t = evs[i].type;
    int leaf = t == NW_EV_PROXY_OP || t == NW_EV_PROXY_STEP || t == NW_EV_KERNEL_CH || t == NW_EV_PROXY_CTRL;
    if (leaf && !evs[i].stopped && !ctx_dead[evs[i].ctx]) open++;
  }
  fprintf(out, "summary pid=%d v=%d inits=%llu fins=%llu starts=%u rejected=%llu stops=%llu again=%llu states=%llu "
               "bad_handle=%llu bad_parent=%llu after_fin=%llu overflow=%llu open=%llu",
          (int)pid, STANDIN_MAX, inits, fins, nev, n_rejected, n_stop, n_again, n_state, bad_handle, bad_parent,
          after_fin, overflow, open);
  for (int i = 0; i < 15; i++)
    if (n_start[i]) fprintf(out, " start.%s=%llu", type_name(1ULL << i), n_start[i]);
  fputc('\n', out);
  fflush(out);
}

__attribute__((destructor)) static void at_exit(void) {
  pthread_mutex_lock(&mu);
  if (out && pid == getpid()) summary();
  pthread_mutex_unlock(&mu);
}

/* ---- the calls ------------------------------------------------------------------------ */

static int do_init(int v, void **ctx, int *mask, long long id, int nranks, int rank) {
  pthread_mutex_lock(&mu);
  setup();
  inits++;
  const char *f = getenv("STANDIN_INIT_FAIL");
  if (f && !strcmp(f, "1")) {
    line("init failed v=%d", v);
    pthread_mutex_unlock(&mu);
    return 3; /* ncclInternalError */
  }
  uint32_t c = nctx < MAX_CTX ? nctx++ : MAX_CTX - 1;
  *ctx = (void *)(uintptr_t)(CTX_BASE | ((uint64_t)c << 4));
  int m = NW_EV_GROUP | NW_EV_COLL | NW_EV_P2P | NW_EV_PROXY_OP | NW_EV_PROXY_STEP | NW_EV_PROXY_CTRL |
          NW_EV_KERNEL_CH | NW_EV_NET_PLUGIN;
  if (v >= 5) m |= NW_EV_GROUP_API | NW_EV_COLL_API | NW_EV_P2P_API | NW_EV_KERNEL_LAUNCH;
  if (v >= 6) m |= NW_EV_CE_COLL | NW_EV_CE_SYNC | NW_EV_CE_BATCH;
  const char *ms = getenv("STANDIN_MASK");
  if (ms && *ms) m = (int)strtol(ms, NULL, 0);
  *mask = m;
  if (v == 3)
    line("init ctx=%u v=3 id=- nranks=- rank=-", c);
  else
    line("init ctx=%u v=%d id=0x%llx nranks=%d rank=%d", c, v, (unsigned long long)id, nranks, rank);
  pthread_mutex_unlock(&mu);
  return 0;
}

static int do_finalize(void *ctx) {
  pthread_mutex_lock(&mu);
  setup();
  long c = ctx_of(ctx);
  if (c < 0 || ctx_dead[c]) {
    bad_handle++;
    line("fin bad");
  } else {
    ctx_dead[c] = 1;
    fins++;
    line("fin ctx=%ld", c);
    /* A process that leaves through _exit (a forked child) runs no destructor: the summary
     * so far after every finalize, the last one complete. */
    summary();
  }
  pthread_mutex_unlock(&mu);
  return 0;
}

/* What a parent must be, by the child's type (a plugin follows parents). */
static int parent_ok(uint64_t child, uint64_t parent) {
  switch (child) {
  case NW_EV_COLL:
  case NW_EV_P2P: return parent == NW_EV_GROUP;
  case NW_EV_KERNEL_CH:
  case NW_EV_PROXY_OP: return parent == NW_EV_COLL || parent == NW_EV_P2P;
  case NW_EV_PROXY_STEP: return parent == NW_EV_PROXY_OP;
  case NW_EV_NET_PLUGIN: return parent == NW_EV_PROXY_STEP;
  case NW_EV_COLL_API:
  case NW_EV_P2P_API:
  case NW_EV_KERNEL_LAUNCH: return parent == NW_EV_GROUP_API;
  default: return 1;
  }
}

/* One start, whatever the version: `parent` the Group for a Coll or P2p; `api` (v5+) a Coll's
 * or P2p's parentObj, its API event or NULL; `fields` what the line says of it. */
static void do_start(void *ctx, void **h, uint64_t type, const void *parent, const void *api, int foreign_pid,
                     const char *fields) {
  *h = NULL;
  pthread_mutex_lock(&mu);
  setup();
  long c = ctx_of(ctx);
  if (c < 0 || ctx_dead[c]) {
    after_fin += c >= 0;
    bad_handle += c < 0;
    line("start bad ctx");
    pthread_mutex_unlock(&mu);
    return;
  }
  if (nev == MAX_EV) {
    overflow++;
    pthread_mutex_unlock(&mu);
    return;
  }
  uint32_t e = nev++;
  evs[e] = (struct ev){.type = (uint16_t)type, .ctx = (uint16_t)c};
  n_start[type_bit(type)]++;
  char pbuf[24];
  int reject = 0;
  if (!parent) {
    snprintf(pbuf, sizeof pbuf, "-");
    /* Children need a parent to be followed, as real plugins do (Inspector returns early). */
    reject = type == NW_EV_KERNEL_CH || type == NW_EV_PROXY_STEP || (type == NW_EV_PROXY_OP && !foreign_pid);
  } else if (foreign_pid) {
    snprintf(pbuf, sizeof pbuf, "x");
  } else {
    long p = ev_of(parent);
    if (p < 0 || !parent_ok(type, evs[p].type) || evs[p].ctx != c) {
      bad_parent++;
      reject = 1;
      snprintf(pbuf, sizeof pbuf, "bad");
    } else {
      snprintf(pbuf, sizeof pbuf, "%ld", p);
    }
  }
  if (api) {
    long a = ev_of(api);
    if (a < 0 || (evs[a].type != NW_EV_COLL_API && evs[a].type != NW_EV_P2P_API)) bad_parent++;
  }
  line("start ctx=%ld ev=%u type=%s parent=%s%s%s", c, e, type_name(type), pbuf, fields[0] ? " " : "", fields);
  if (reject) {
    n_rejected++;
  } else {
    *h = (void *)(uintptr_t)(EV_BASE | ((uint64_t)e << 4));
  }
  pthread_mutex_unlock(&mu);
}

/* Checks a handle of a stop or state call; -1 when it is none of ours or of a dead comm. */
static long handle_check(void *h) {
  long e = ev_of(h);
  if (e < 0) {
    bad_handle++;
    return -1;
  }
  if (ctx_dead[evs[e].ctx]) {
    after_fin++;
    return -1;
  }
  return e;
}

static int do_stop(void *h) {
  pthread_mutex_lock(&mu);
  setup();
  long e = handle_check(h);
  if (e >= 0) {
    n_stop++;
    if (evs[e].stopped) n_again++;
    line("stop ev=%ld%s", e, evs[e].stopped ? " again" : "");
    evs[e].stopped = 1;
  } else {
    line("stop bad");
  }
  pthread_mutex_unlock(&mu);
  return 0;
}

static int do_state(void *h, int st) {
  pthread_mutex_lock(&mu);
  setup();
  long e = handle_check(h);
  if (e >= 0) {
    n_state++;
    line("state ev=%ld st=%d", e, st);
  } else {
    line("state bad st=%d", st);
  }
  pthread_mutex_unlock(&mu);
  return 0;
}

/* ---- descriptors ---------------------------------------------------------------------- */

static void coll_fields(char *f, size_t n, const char *func, uint64_t count, const char *dtype, int root, int nch) {
  snprintf(f, n, "func=%s count=%llu dtype=%s root=%d nch=%d", func ? func : "-", (unsigned long long)count,
           dtype ? dtype : "-", root, nch);
}

static void p2p_fields(char *f, size_t n, const char *func, uint64_t count, const char *dtype, int peer) {
  snprintf(f, n, "func=%s count=%llu dtype=%s peer=%d", func ? func : "-", (unsigned long long)count, dtype ? dtype : "-",
           peer);
}

static void op_fields(char *f, size_t n, const struct nw_proxy_op *o) {
  snprintf(f, n, "peer=%d send=%d steps=%d ch=%d", o->peer, o->isSend, o->nSteps, o->channelId);
}

static int foreign(uint64_t type, const struct nw_proxy_op *o) {
  return type == NW_EV_PROXY_OP && o->pid != 0 && o->pid != getpid();
}

TABLE_FN nw_result_t v3_init(void **ctx, int *mask) { return do_init(3, ctx, mask, 0, 0, 0); }

TABLE_FN nw_result_t v3_start(void *ctx, void **h, struct nw_descr_v3 *d) {
  char f[200] = "";
  uint64_t t = d->type;
  switch (quiet ? 0 : t) {
  case NW_EV_COLL:
    coll_fields(f, sizeof f, d->coll.func, d->coll.count, d->coll.datatype, d->coll.root, d->coll.nMaxChannels);
    snprintf(f + strlen(f), sizeof f - strlen(f), " hash=0x%llx", (unsigned long long)d->coll.commHash);
    break;
  case NW_EV_P2P:
    p2p_fields(f, sizeof f, d->p2p.func, d->p2p.count, d->p2p.datatype, d->p2p.peer);
    snprintf(f + strlen(f), sizeof f - strlen(f), " hash=0x%llx", (unsigned long long)d->p2p.commHash);
    break;
  case NW_EV_PROXY_OP: op_fields(f, sizeof f, &d->proxyOp); break;
  case NW_EV_PROXY_STEP: snprintf(f, sizeof f, "step=%d", d->proxyStep.step); break;
  case NW_EV_KERNEL_CH: snprintf(f, sizeof f, "ch=%d", d->kernelCh.channelId); break;
  default: break;
  }
  do_start(ctx, h, t, d->parentObj, NULL, foreign(t, &d->proxyOp), f);
  return 0;
}

TABLE_FN nw_result_t v3_state(void *h, int st, union nw_state_args_v3 *a) {
  (void)a;
  return do_state(h, st);
}

/* v4's members, and v5/v6's which hold them (parent: the Group of a Coll or P2p). */
static void v4_fields(char *f, size_t n, uint64_t t, const struct nw_coll_v4 *coll, const struct nw_p2p_v4 *p2p,
                      const struct nw_proxy_op *op, int step, const struct nw_kernel_ch_v4 *kch) {
  f[0] = 0;
  if (quiet) return; /* no lines: a cheap plugin for the micro-benchmark */
  switch (t) {
  case NW_EV_COLL: coll_fields(f, n, coll->func, coll->count, coll->datatype, coll->root, coll->nChannels); break;
  case NW_EV_P2P: p2p_fields(f, n, p2p->func, p2p->count, p2p->datatype, p2p->peer); break;
  case NW_EV_PROXY_OP: op_fields(f, n, op); break;
  case NW_EV_PROXY_STEP: snprintf(f, n, "step=%d", step); break;
  case NW_EV_KERNEL_CH: snprintf(f, n, "ch=%d timer=%llu", kch->channelId, (unsigned long long)kch->pTimer); break;
  default: break;
  }
}

TABLE_FN nw_result_t v4_init(void **ctx, int *mask, const char *name, uint64_t id, int nnodes, int nranks, int rank,
                           nw_logger_t logfn) {
  (void)name, (void)nnodes, (void)logfn;
  return do_init(4, ctx, mask, (long long)id, nranks, rank);
}

TABLE_FN nw_result_t v4_start(void *ctx, void **h, struct nw_descr_v4 *d) {
  char f[200];
  uint64_t t = d->type;
  v4_fields(f, sizeof f, t, &d->coll, &d->p2p, &d->proxyOp, d->proxyStep.step, &d->kernelCh);
  do_start(ctx, h, t, d->parentObj, NULL, foreign(t, &d->proxyOp), f);
  return 0;
}

TABLE_FN nw_result_t v4_state(void *h, int st, union nw_state_args_v4 *a) {
  (void)a;
  return do_state(h, st);
}

TABLE_FN nw_result_t v5_init(void **ctx, uint64_t id, int *mask, const char *name, int nnodes, int nranks, int rank,
                           nw_logger_t logfn) {
  (void)name, (void)nnodes, (void)logfn;
  return do_init(5, ctx, mask, (long long)id, nranks, rank);
}

TABLE_FN nw_result_t v6_init(void **ctx, uint64_t id, int *mask, const char *name, int nnodes, int nranks, int rank,
                           nw_logger_t logfn) {
  (void)name, (void)nnodes, (void)logfn;
  return do_init(6, ctx, mask, (long long)id, nranks, rank);
}

/* v5 and v6 lay out every member used here alike. */
TABLE_FN nw_result_t v5_start(void *ctx, void **h, struct nw_descr_v5 *d) {
  char f[200];
  uint64_t t = d->type;
  v4_fields(f, sizeof f, t, &d->coll.v4, &d->p2p.v4, &d->proxyOp, d->proxyStep.step, &d->kernelCh);
  const void *parent = d->parentObj, *api = NULL;
  if (t == NW_EV_COLL || t == NW_EV_P2P) {
    api = d->parentObj;
    parent = t == NW_EV_COLL ? d->coll.parentGroup : d->p2p.parentGroup;
  }
  do_start(ctx, h, t, parent, api, foreign(t, &d->proxyOp), f);
  return 0;
}

TABLE_FN nw_result_t v6_start(void *ctx, void **h, struct nw_descr_v6 *d) { return v5_start(ctx, h, (struct nw_descr_v5 *)d); }

static nw_result_t any_stop(void *h) { return do_stop(h); }
static nw_result_t any_finalize(void *ctx) { return do_finalize(ctx); }

#define EXPORT __attribute__((visibility("default")))
EXPORT struct nw_profiler_v3 ncclProfiler_v3 = {"standin", v3_init, v3_start, any_stop, v3_state, any_finalize};
#if STANDIN_MAX >= 4
EXPORT struct nw_profiler_v4 ncclProfiler_v4 = {"standin", v4_init, v4_start, any_stop, v4_state, any_finalize};
#endif
#if STANDIN_MAX >= 5
EXPORT struct nw_profiler_v5 ncclProfiler_v5 = {"standin", v5_init, v5_start, any_stop, v4_state, any_finalize};
#endif
#if STANDIN_MAX >= 6
EXPORT struct nw_profiler_v6 ncclProfiler_v6 = {"standin", v6_init, v6_start, any_stop, v4_state, any_finalize};
#endif
