/*
 * A second profiler plugin beside the watchdog's. NCCL loads one profiler plugin
 * (NVIDIA/nccl#1981); NCCLWATCH_PROFILER_CHAIN=/path/to/other.so makes this one dlopen another
 * (NCCL Inspector, a vendor profiler) and call it with everything NCCL calls this one with:
 * every init, startEvent, stopEvent, recordEventState and finalize, with the other plugin's own
 * contexts and event handles.
 *
 * Pairs. NCCL holds one context per communicator and one handle per event, and hands them back
 * (a Coll's handle as the parent of its kernel channels and proxy ops, long after the Coll
 * stopped). Chained, each is a pair: the watchdog's and the other plugin's. NCCL gets an
 * encoded integer, tag(4) | index(16) | generation(44), naming a slot of one of three static
 * tables; nothing is allocated after the chained plugin loaded.
 *  - contexts: one slot per communicator, freed at finalize;
 *  - task events (Group, Coll, P2p, the API events, copy-engine events): NCCL uses them as
 *    parents after they stopped, for as long as their kernels and proxy ops take to start, so
 *    they are never freed: a ring of 65,536 reused in allocation order, a generation telling a
 *    stale handle (an op 65,536 events behind the newest) from a live one;
 *  - the others (ProxyOp, ProxyStep, ProxyCtrl, KernelCh, NetPlugin) end with their stop: a
 *    free list of 65,536, freed at stop or at their communicator's finalize.
 * A parent is translated to each plugin's own handle. The chained plugin never sees a value of
 * the watchdog's: a parent it cannot be given is NULL to it (a proxy op posted by another
 * process keeps its raw parent: both plugins check the pid before following it). An event
 * that finds no pair slot left, or whose parent pair went stale, is counted in the region's
 * chain_dropped; the watchdog's own event goes on.
 *
 * Versions. NCCL picks the newest ncclProfiler_vN it knows in this library (all four are
 * exported), whatever the chained plugin supports: the chained plugin is called through its own
 * newest table not newer than NCCL's, and each event and state is converted down to it as NCCL
 * converts its own for an older plugin (profiler_v{3,4,5}.cc): events and states that version
 * does not have are not forwarded, and the mask it asks for is limited to the events it knows.
 * A chained plugin that only has tables newer than NCCL's is not used.
 *
 * A missing or broken chained plugin (no file, no table, this plugin itself, its init failing)
 * is one WARN through NCCL's logger (stderr under v3) and the region's chain_state and
 * chain_error; the watchdog's profiler goes on alone.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#if defined(__x86_64__) && defined(__GLIBC__)
/* As in plugin.c: the original symbol versions, so the library loads on glibc 2.17 and later. */
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
#endif

int nw_chained;

/* This library's own tables: NCCLWATCH_PROFILER_CHAIN naming this library is refused. */
extern struct nw_profiler_v3 ncclProfiler_v3;
extern struct nw_profiler_v4 ncclProfiler_v4;
extern struct nw_profiler_v5 ncclProfiler_v5;
extern struct nw_profiler_v6 ncclProfiler_v6;

enum { P_TASK = 8, P_LEAF = 9, P_CTX = 10 };
#define NW_CHAIN_TASKS (1u << 16)
#define NW_CHAIN_LEAVES (1u << 16)
#define NW_CHAIN_CTXS 1024u
_Static_assert(NW_CHAIN_TASKS <= 1u << 16 && NW_CHAIN_LEAVES <= 1u << 16 && NW_CHAIN_CTXS <= 1u << 16,
               "indexes fit the handle's 16 bits");

static inline void *pair_make(unsigned tag, uint32_t idx, uint64_t gen) {
  return (void *)(uintptr_t)((uint64_t)tag | ((uint64_t)idx << 4) | (gen << 20));
}
static inline unsigned pair_tag(const void *h) { return (unsigned)((uintptr_t)h & 0xF); }
static inline uint32_t pair_idx(const void *h) { return (uint32_t)(((uintptr_t)h >> 4) & 0xFFFF); }
static inline uint64_t pair_gen(const void *h) { return (uint64_t)(uintptr_t)h >> 20; }
static inline int is_pair(const void *h) { return pair_tag(h) == P_TASK || pair_tag(h) == P_LEAF; }

/* A communicator: the two contexts. Written under g_mu (init, finalize); events read it with
 * atomic loads, the generation last written and first read. */
struct ctx_pair {
  uint32_t gen; /* bumped at finalize */
  int live;
  void *ours, *theirs;
  uint64_t comm_id;
  int their_mask; /* the chained plugin's activation mask (it may keep the pointer) */
};

struct task_pair {
  uint64_t seq; /* allocation number + 1; 0 never used */
  void *ours, *theirs;
  uint32_t ctx, ctx_gen;
};

struct leaf_pair {
  uint32_t gen; /* bumped when freed */
  uint32_t next; /* free list: index + 1, 0 ends it */
  int live;
  void *ours, *theirs;
  uint32_t ctx, ctx_gen;
};

static struct ctx_pair g_ctx[NW_CHAIN_CTXS];
static struct task_pair g_task[NW_CHAIN_TASKS];
static struct leaf_pair g_leaf[NW_CHAIN_LEAVES];
static uint64_t g_task_next;
static uint32_t g_leaf_free;
static int g_task_lock, g_leaf_lock;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_tried;
static pid_t g_chain_pid;
static unsigned g_abi; /* the chained plugin's table version */
static void *g_table;  /* its ncclProfiler_v<g_abi> */
static char g_name[32];
static int g_init_warned;

/* ---- the chained plugin's table, whatever its version ----------------------------------- */

#define THEIRS(field)                                                                                                  \
  (g_abi == 3   ? (void *)((struct nw_profiler_v3 *)g_table)->field                                                    \
   : g_abi == 4 ? (void *)((struct nw_profiler_v4 *)g_table)->field                                                    \
   : g_abi == 5 ? (void *)((struct nw_profiler_v5 *)g_table)->field                                                    \
                : (void *)((struct nw_profiler_v6 *)g_table)->field)

static nw_result_t their_start(void *ctx, void **h, void *d) {
  switch (g_abi) {
  case 3: return ((struct nw_profiler_v3 *)g_table)->startEvent(ctx, h, d);
  case 4: return ((struct nw_profiler_v4 *)g_table)->startEvent(ctx, h, d);
  case 5: return ((struct nw_profiler_v5 *)g_table)->startEvent(ctx, h, d);
  default: return ((struct nw_profiler_v6 *)g_table)->startEvent(ctx, h, d);
  }
}

/* stopEvent and finalize have one signature in every version. */
static nw_result_t their_stop(void *h) { return ((struct nw_profiler_v5 *)g_table)->stopEvent(h); }
static nw_result_t their_finalize(void *ctx) { return ((struct nw_profiler_v5 *)g_table)->finalize(ctx); }

static nw_result_t their_record(void *h, int state, void *args) {
  if (g_abi == 3) return ((struct nw_profiler_v3 *)g_table)->recordEventState(h, state, args);
  return ((struct nw_profiler_v5 *)g_table)->recordEventState(h, state, args);
}

/* The event types a table version knows: v3 and v4 up to NetPlugin, v5 the API events, v6
 * the copy-engine events. */
static int known_types(unsigned abi) {
  int all = NW_EV_GROUP | NW_EV_COLL | NW_EV_P2P | NW_EV_PROXY_OP | NW_EV_PROXY_STEP | NW_EV_PROXY_CTRL |
            NW_EV_KERNEL_CH | NW_EV_NET_PLUGIN;
  if (abi >= 5) all |= NW_EV_GROUP_API | NW_EV_COLL_API | NW_EV_P2P_API | NW_EV_KERNEL_LAUNCH;
  if (abi >= 6) all |= NW_EV_CE_COLL | NW_EV_CE_SYNC | NW_EV_CE_BATCH;
  return all;
}

static void count_dropped(void) {
  struct nw_hdr *h = nw_ours_header();
  if (h) __atomic_fetch_add(&h->chain_dropped, 1, __ATOMIC_RELAXED);
}

/* ---- loading ---------------------------------------------------------------------------- */

static void report(uint32_t state, const char *err) {
  struct nw_hdr *h = nw_ours_header();
  if (!h) return;
  if (err) snprintf(h->chain_error, sizeof h->chain_error, "%s", err);
  snprintf(h->chain_name, sizeof h->chain_name, "%s", g_name);
  __atomic_store_n(&h->chain_abi, state == NW_CHAIN_ACTIVE ? g_abi : 0, __ATOMIC_RELAXED);
  __atomic_store_n(&h->chain_state, state, __ATOMIC_RELEASE);
}

static void refuse(const char *path, const char *why) {
  nw_ours_log(NW_LOG_WARN, "NCCL watchdog profiler: NCCLWATCH_PROFILER_CHAIN=%s: %s; the watchdog profiler goes on alone",
              path, why);
  report(NW_CHAIN_FAILED, why);
}

static void leaves_reset(void) {
  for (uint32_t i = 0; i < NW_CHAIN_LEAVES; i++) {
    g_leaf[i].live = 0;
    g_leaf[i].next = i + 2 <= NW_CHAIN_LEAVES ? i + 2 : 0;
  }
  g_leaf_free = 1;
}

/* Loads the plugin NCCLWATCH_PROFILER_CHAIN names for NCCL's table version abi. Under g_mu. */
static void load(unsigned abi) {
  const char *path = getenv("NCCLWATCH_PROFILER_CHAIN");
  if (!path || !*path) return;
  char why[160];
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!lib) {
    const char *e = dlerror();
    snprintf(why, sizeof why, "cannot load it: %s", e ? e : "dlopen failed");
    refuse(path, why);
    return;
  }
  void *mine[7] = {NULL, NULL, NULL, &ncclProfiler_v3, &ncclProfiler_v4, &ncclProfiler_v5, &ncclProfiler_v6};
  unsigned v = abi;
  void *table = NULL;
  for (; v >= 3 && !table; v--) {
    char sym[32];
    snprintf(sym, sizeof sym, "ncclProfiler_v%u", v);
    table = dlsym(lib, sym);
    if (table) break;
  }
  if (!table) {
    snprintf(why, sizeof why, "it exports no ncclProfiler_v3 to v%u (NCCL calls this plugin through v%u)", abi, abi);
    refuse(path, why);
    return;
  }
  if (table == mine[v]) {
    refuse(path, "that is this plugin itself");
    return;
  }
  g_abi = v;
  g_table = table;
  const char *name = g_abi == 3 ? ((struct nw_profiler_v3 *)g_table)->name : ((struct nw_profiler_v5 *)g_table)->name;
  snprintf(g_name, sizeof g_name, "%s", name ? name : "");
  if (!THEIRS(init) || !THEIRS(startEvent) || !THEIRS(stopEvent) || !THEIRS(recordEventState) || !THEIRS(finalize)) {
    snprintf(why, sizeof why, "its ncclProfiler_v%u table lacks a function", v);
    refuse(path, why);
    return;
  }
  if (name && !strcmp(name, "ncclwatch")) {
    /* Another copy of this plugin would write the same region file as this one. */
    refuse(path, "that is an NCCL watchdog profiler too");
    return;
  }
  leaves_reset();
  __atomic_store_n(&nw_chained, 1, __ATOMIC_RELEASE);
  report(NW_CHAIN_ACTIVE, NULL);
  nw_ours_log(NW_LOG_INFO, "NCCL watchdog profiler: chained %s (%s), called through its ncclProfiler_v%u",
              g_name[0] ? g_name : "a profiler", path, v);
}

/* A child forked after NCCL started: its parent's contexts and handles mean nothing to it. */
static void forget_parent(void) {
  memset(g_ctx, 0, sizeof g_ctx);
  memset(g_task, 0, sizeof g_task);
  g_task_next = 0;
  leaves_reset();
  g_chain_pid = getpid();
}

/* ---- pairs ------------------------------------------------------------------------------ */

struct ctx_view {
  uint32_t idx, gen;
  void *ours, *theirs;
  uint64_t comm_id;
};

static int ctx_get(void *ctx, struct ctx_view *v) {
  if (pair_tag(ctx) != P_CTX || pair_idx(ctx) >= NW_CHAIN_CTXS) return 0;
  struct ctx_pair *c = &g_ctx[pair_idx(ctx)];
  uint32_t gen = __atomic_load_n(&c->gen, __ATOMIC_ACQUIRE);
  if (gen != (uint32_t)pair_gen(ctx) || !__atomic_load_n(&c->live, __ATOMIC_ACQUIRE)) return 0;
  v->idx = pair_idx(ctx);
  v->gen = gen;
  v->ours = __atomic_load_n(&c->ours, __ATOMIC_RELAXED);
  v->theirs = __atomic_load_n(&c->theirs, __ATOMIC_RELAXED);
  v->comm_id = __atomic_load_n(&c->comm_id, __ATOMIC_RELAXED);
  return 1;
}

/* Is the chained plugin's context of an event still live (its communicator not finalized)? */
static int ctx_alive(uint32_t idx, uint32_t gen) {
  struct ctx_pair *c = &g_ctx[idx % NW_CHAIN_CTXS];
  return __atomic_load_n(&c->gen, __ATOMIC_ACQUIRE) == gen && __atomic_load_n(&c->live, __ATOMIC_ACQUIRE);
}

/* The pool of an event type: those NCCL stops once and never names again go to the free list. */
static int leafy(uint64_t type) {
  return type == NW_EV_PROXY_OP || type == NW_EV_PROXY_STEP || type == NW_EV_PROXY_CTRL || type == NW_EV_KERNEL_CH ||
         type == NW_EV_NET_PLUGIN;
}

static void *pair_new(uint64_t type, void *ours, void *theirs, const struct ctx_view *cv) {
  if (!leafy(type)) {
    spin_lock(&g_task_lock);
    uint64_t n = g_task_next++;
    struct task_pair *p = &g_task[n % NW_CHAIN_TASKS];
    *p = (struct task_pair){.seq = n + 1, .ours = ours, .theirs = theirs, .ctx = cv->idx, .ctx_gen = cv->gen};
    spin_unlock(&g_task_lock);
    return pair_make(P_TASK, (uint32_t)(n % NW_CHAIN_TASKS), n / NW_CHAIN_TASKS);
  }
  spin_lock(&g_leaf_lock);
  uint32_t f = g_leaf_free;
  void *h = NULL;
  if (f && f <= NW_CHAIN_LEAVES) {
    struct leaf_pair *p = &g_leaf[f - 1];
    g_leaf_free = p->next;
    p->live = 1;
    p->ours = ours;
    p->theirs = theirs;
    p->ctx = cv->idx;
    p->ctx_gen = cv->gen;
    h = pair_make(P_LEAF, f - 1, p->gen);
  }
  spin_unlock(&g_leaf_lock);
  return h;
}

static void leaf_free_locked(struct leaf_pair *p) {
  p->live = 0;
  p->gen++;
  p->next = g_leaf_free;
  g_leaf_free = (uint32_t)(p - g_leaf) + 1;
}

struct pair_view {
  void *ours, *theirs;
  uint32_t ctx, ctx_gen;
};

/* Reads a pair; a leaf is freed at once when `stop`. 0: not a pair of this process, or stale. */
static int pair_get(void *h, struct pair_view *v, int stop) {
  int ok = 0;
  if (pair_tag(h) == P_TASK) {
    uint64_t n = pair_gen(h) * NW_CHAIN_TASKS + pair_idx(h);
    struct task_pair *p = &g_task[pair_idx(h) % NW_CHAIN_TASKS];
    spin_lock(&g_task_lock);
    if (p->seq == n + 1) {
      *v = (struct pair_view){p->ours, p->theirs, p->ctx, p->ctx_gen};
      ok = 1;
    }
    spin_unlock(&g_task_lock);
  } else if (pair_tag(h) == P_LEAF) {
    struct leaf_pair *p = &g_leaf[pair_idx(h) % NW_CHAIN_LEAVES];
    spin_lock(&g_leaf_lock);
    if (p->live && p->gen == (uint32_t)pair_gen(h)) {
      *v = (struct pair_view){p->ours, p->theirs, p->ctx, p->ctx_gen};
      ok = 1;
      if (stop) leaf_free_locked(p);
    }
    spin_unlock(&g_leaf_lock);
  }
  return ok;
}

/* A parent for the watchdog: its half of a pair; NULL for a stale pair; a value that is no
 * pair passes as it is (the watchdog checks it), as does any parent of a proxy op another
 * process posted (pid_ok 0: that process's value, which the watchdog does not follow). */
static void *ours_parent(void *p, int pid_ok) {
  if (!p || !pid_ok || !is_pair(p)) return p;
  struct pair_view v;
  return pair_get(p, &v, 0) ? v.ours : NULL;
}

/* A parent for the chained plugin: its half of a pair of the same communicator, never a value
 * of the watchdog's nor one of another (or a finalized) communicator, which it would follow;
 * another process's parent passes as it is (the chained plugin checks the pid, as NCCL
 * requires). */
static void *their_parent(void *p, int pid_ok, const struct ctx_view *cv, int *stale) {
  if (!p) return NULL;
  if (!pid_ok) return p;
  struct pair_view v;
  if (is_pair(p) && pair_get(p, &v, 0) && v.ctx == cv->idx && v.ctx_gen == cv->gen) return v.theirs;
  *stale = 1;
  return NULL;
}

/* ---- events, converted down to the chained plugin's version ----------------------------- */

/* The event type of NCCL's descriptor: v3 and v4 declare it 8 bits wide; v5 and v6 64 bits,
 * read as plugin.c reads it (the low byte when set, the API and copy-engine bits above). */
static uint64_t descr_type(unsigned abi, const void *d) {
  if (abi <= 4) return abi == 3 ? ((const struct nw_descr_v3 *)d)->type : ((const struct nw_descr_v4 *)d)->type;
  uint64_t t = ((const struct nw_descr_v5 *)d)->type;
  t = (t & 0xFF) ? (t & 0xFF) : (t & 0xFFFF);
  return (t & (t - 1)) ? 0 : t; /* one bit, or no event known */
}

static int descr_pid(unsigned abi, const void *d) {
  return abi == 3 ? ((const struct nw_descr_v3 *)d)->proxyOp.pid
         : abi == 4 ? ((const struct nw_descr_v4 *)d)->proxyOp.pid
                    : ((const struct nw_descr_v5 *)d)->proxyOp.pid;
}

union their_descr {
  struct nw_descr_v3 v3;
  struct nw_descr_v4 v4;
  struct nw_descr_v5 v5;
  struct nw_descr_v6 v6;
};

/* The v4-shaped members of NCCL's descriptor (v4, v5 or v6), and a Coll's or P2p's plan. */
struct v4_view {
  void *parent;
  int rank;
  const struct nw_coll_v4 *coll;
  const struct nw_p2p_v4 *p2p;
  const struct nw_proxy_op *op;
  int step;
  const struct nw_kernel_ch_v4 *kch;
  const struct nw_net_plugin *net;
};

static struct v4_view view_v4(unsigned abi, const void *descr, uint64_t type) {
  struct v4_view w;
  if (abi == 4) {
    const struct nw_descr_v4 *d = descr;
    w = (struct v4_view){d->parentObj, d->rank, &d->coll, &d->p2p, &d->proxyOp, d->proxyStep.step, &d->kernelCh,
                         &d->netPlugin};
  } else {
    const struct nw_descr_v5 *d = descr; /* v6 has every member here at the same place */
    w = (struct v4_view){d->parentObj, d->rank, &d->coll.v4, &d->p2p.v4, &d->proxyOp, d->proxyStep.step, &d->kernelCh,
                         &d->netPlugin};
    if (type == NW_EV_COLL) w.parent = d->coll.parentGroup;
    if (type == NW_EV_P2P) w.parent = d->p2p.parentGroup;
  }
  return w;
}

/* Builds the chained plugin's descriptor of an event NCCL described in version abi (>= g_abi).
 * 0: that version has no such event. */
static int build_theirs(unsigned abi, const void *descr, uint64_t type, int pid_ok, const struct ctx_view *cv,
                        union their_descr *out, int *stale) {
  if (!(type & known_types(g_abi))) return 0;
  if (g_abi >= 5 || g_abi == abi) {
    /* Same layout (v5 and v6 share every v5 member's place): a copy, parents translated. */
    size_t n = abi == 3 ? sizeof out->v3 : abi == 4 ? sizeof out->v4 : sizeof out->v5;
    memcpy(out, descr, n);
    if (abi == 3) {
      out->v3.parentObj = their_parent(out->v3.parentObj, pid_ok, cv, stale);
    } else if (abi == 4) {
      out->v4.parentObj = their_parent(out->v4.parentObj, pid_ok, cv, stale);
    } else {
      out->v5.type = type; /* as understood: nothing but its bit (see descr_type) */
      out->v5.parentObj = their_parent(out->v5.parentObj, pid_ok, cv, stale);
      if (type == NW_EV_COLL) out->v5.coll.parentGroup = their_parent(out->v5.coll.parentGroup, 1, cv, stale);
      if (type == NW_EV_P2P) out->v5.p2p.parentGroup = their_parent(out->v5.p2p.parentGroup, 1, cv, stale);
    }
    return 1;
  }
  struct v4_view w = view_v4(abi, descr, type);
  void *parent = their_parent(w.parent, pid_ok, cv, stale);
  if (g_abi == 4) {
    struct nw_descr_v4 *d = &out->v4;
    memset(d, 0, sizeof *d);
    d->type = (uint8_t)type;
    d->parentObj = parent;
    d->rank = w.rank;
    switch (type) {
    case NW_EV_COLL: d->coll = *w.coll; break;
    case NW_EV_P2P: d->p2p = *w.p2p; break;
    case NW_EV_PROXY_OP: d->proxyOp = *w.op; break;
    case NW_EV_PROXY_STEP: d->proxyStep.step = w.step; break;
    case NW_EV_KERNEL_CH: d->kernelCh = *w.kch; break;
    case NW_EV_NET_PLUGIN: d->netPlugin = *w.net; break;
    default: break;
    }
    return 1;
  }
  /* v3: the comm's hash inside Coll and P2p (v3's init has none), no kernel timer. */
  struct nw_descr_v3 *d = &out->v3;
  memset(d, 0, sizeof *d);
  d->type = (uint8_t)type;
  d->parentObj = parent;
  d->rank = w.rank;
  switch (type) {
  case NW_EV_COLL:
    d->coll.commHash = cv->comm_id;
    d->coll.seqNumber = w.coll->seqNumber;
    d->coll.func = w.coll->func;
    d->coll.sendBuff = w.coll->sendBuff;
    d->coll.recvBuff = w.coll->recvBuff;
    d->coll.count = w.coll->count;
    d->coll.root = w.coll->root;
    d->coll.datatype = w.coll->datatype;
    d->coll.nMaxChannels = w.coll->nChannels;
    d->coll.nWarps = w.coll->nWarps;
    d->coll.algo = w.coll->algo;
    d->coll.proto = w.coll->proto;
    break;
  case NW_EV_P2P:
    d->p2p.commHash = cv->comm_id;
    d->p2p.func = w.p2p->func;
    d->p2p.buff = w.p2p->buff;
    d->p2p.datatype = w.p2p->datatype;
    d->p2p.count = w.p2p->count;
    d->p2p.peer = w.p2p->peer;
    break;
  case NW_EV_PROXY_OP: d->proxyOp = *w.op; break;
  case NW_EV_PROXY_STEP: d->proxyStep.step = w.step; break;
  case NW_EV_KERNEL_CH: d->kernelCh.channelId = w.kch->channelId; break;
  case NW_EV_NET_PLUGIN: d->netPlugin = *w.net; break;
  default: break;
  }
  return 1;
}

/* ---- entry points ----------------------------------------------------------------------- */

nw_result_t nw_chain_init(unsigned abi, void **ctx, int *mask, uint64_t id, const char *name, int nnodes,
                          int nranks, int rank, nw_logger_t logfn) {
  pthread_mutex_lock(&g_mu);
  if (g_tried && nw_chained && getpid() != g_chain_pid) forget_parent();
  void *oc = NULL;
  int om = 0;
  nw_ours_init(abi, &oc, &om, id, nnodes, nranks, rank, logfn); /* first: the region and NCCL's logger */
  if (!g_tried) {
    g_tried = 1;
    g_chain_pid = getpid();
    load(abi);
  }
  if (!__atomic_load_n(&nw_chained, __ATOMIC_RELAXED)) {
    if (ctx) *ctx = oc;
    if (mask) *mask = om;
    pthread_mutex_unlock(&g_mu);
    return NW_SUCCESS;
  }
  if (ctx) *ctx = NULL;
  uint32_t i = 0;
  while (i < NW_CHAIN_CTXS && g_ctx[i].live) i++;
  if (!ctx || !mask || i == NW_CHAIN_CTXS) {
    /* No slot: the watchdog's own context travels alone (no pair, so the chained plugin is
     * never called for this communicator). Communicators live at once are far fewer. */
    if (i == NW_CHAIN_CTXS) count_dropped();
    if (ctx) *ctx = oc;
    if (mask) *mask = om;
    pthread_mutex_unlock(&g_mu);
    return NW_SUCCESS;
  }
  struct ctx_pair *c = &g_ctx[i];
  c->their_mask = 0;
  void *tc = NULL;
  int rc;
  switch (g_abi) {
  case 3: rc = ((struct nw_profiler_v3 *)g_table)->init(&tc, &c->their_mask); break;
  case 4: rc = ((struct nw_profiler_v4 *)g_table)->init(&tc, &c->their_mask, name, id, nnodes, nranks, rank, logfn); break;
  case 5: rc = ((struct nw_profiler_v5 *)g_table)->init(&tc, id, &c->their_mask, name, nnodes, nranks, rank, logfn); break;
  default: rc = ((struct nw_profiler_v6 *)g_table)->init(&tc, id, &c->their_mask, name, nnodes, nranks, rank, logfn); break;
  }
  if (rc != NW_SUCCESS) {
    if (!g_init_warned) {
      g_init_warned = 1;
      char why[96];
      snprintf(why, sizeof why, "its init failed (error %d) for communicator 0x%llx", rc, (unsigned long long)id);
      nw_ours_log(NW_LOG_WARN,
                  "NCCL watchdog profiler: the chained profiler %s: %s; its communicators' events go to the "
                  "watchdog profiler alone",
                  g_name, why);
      struct nw_hdr *h = nw_ours_header();
      if (h) snprintf(h->chain_error, sizeof h->chain_error, "%s", why);
    }
    tc = NULL;
    c->their_mask = 0;
  }
  __atomic_store_n(&c->ours, oc, __ATOMIC_RELAXED);
  __atomic_store_n(&c->theirs, tc, __ATOMIC_RELAXED);
  __atomic_store_n(&c->comm_id, id, __ATOMIC_RELAXED);
  __atomic_store_n(&c->live, 1, __ATOMIC_RELEASE);
  *ctx = pair_make(P_CTX, i, c->gen);
  *mask = om | (tc ? (c->their_mask & known_types(g_abi)) : 0);
  pthread_mutex_unlock(&g_mu);
  return NW_SUCCESS;
}

nw_result_t nw_chain_start(unsigned abi, void *ctx, void **h, void *descr) {
  *h = NULL;
  struct ctx_view cv;
  if (!descr || !ctx_get(ctx, &cv)) return NW_SUCCESS;
  uint64_t type = descr_type(abi, descr);
  int pid_ok = 1;
  if (type == NW_EV_PROXY_OP) {
    int pid = descr_pid(abi, descr);
    pid_ok = pid == 0 || pid == (int)nw_ours_pid();
  }
  void *oh = NULL, *th = NULL;
  if (type & nw_ours_mask()) {
    struct nw_ev ev;
    nw_ours_ev(abi, descr, &ev);
    ev.parent = ours_parent(ev.parent, pid_ok);
    oh = nw_ours_start(cv.ours, &ev);
  }
  int their_mask = __atomic_load_n(&g_ctx[cv.idx].their_mask, __ATOMIC_RELAXED);
  if (cv.theirs && (type & (uint64_t)their_mask)) {
    union their_descr td;
    int stale = 0;
    if (build_theirs(abi, descr, type, pid_ok, &cv, &td, &stale)) {
      if (stale) count_dropped(); /* its parent is gone: it gets the event without one */
      if (their_start(cv.theirs, &th, &td) != NW_SUCCESS) th = NULL;
    }
  }
  if (!oh && !th) return NW_SUCCESS;
  void *p = pair_new(type, oh, th, &cv);
  if (!p) {
    /* No pair slot: the chained plugin's event ends at once; the watchdog's goes on with its
     * own handle (not a pair: its stop goes to the watchdog only). */
    count_dropped();
    if (th) their_stop(th);
    *h = oh;
    return NW_SUCCESS;
  }
  *h = p;
  return NW_SUCCESS;
}

nw_result_t nw_chain_stop(void *h) {
  if (!is_pair(h)) return nw_ours_stop(h); /* the watchdog's own handle, or a value it checks */
  struct pair_view v;
  if (!pair_get(h, &v, 1)) return NW_SUCCESS;
  if (v.ours) nw_ours_stop(v.ours);
  if (v.theirs && ctx_alive(v.ctx, v.ctx_gen)) their_stop(v.theirs);
  return NW_SUCCESS;
}

/* The state's arguments for the chained plugin, or 0 when its version has no such state. */
static int their_state(unsigned abi, int state, void *args, union nw_state_args_v3 *a3, void **out) {
  *out = args;
  if (g_abi == abi) return 1;
  if (state >= NW_ST_CE_FIRST && state <= NW_ST_CE_LAST) return g_abi >= 6;
  if (state == NW_ST_GROUP_START_API_STOP || state == NW_ST_GROUP_END_API_START) return g_abi >= 5;
  if (g_abi >= 4) return 1; /* v4 to v6 share the other states and their arguments' shape */
  /* v3 from v4+: the proxy-control states keep their argument, the step states none. */
  memset(a3, 0, sizeof *a3);
  *out = a3;
  if (state >= NW_ST_CTRL_IDLE && state <= NW_ST_CTRL_APPEND_END) {
    if (args) a3->proxyCtrl.appendedProxyOps = ((union nw_state_args_v4 *)args)->proxyCtrl.appendedProxyOps;
    return 1;
  }
  return state >= NW_ST_STEP_SEND_GPU_WAIT && state <= NW_ST_STEP_RECV_GPU_WAIT;
}

nw_result_t nw_chain_state(unsigned abi, void *h, int state, void *args) {
  uint64_t timer = abi >= 4 && state == NW_ST_KERNEL_CH_STOP && args ? ((union nw_state_args_v4 *)args)->kernelCh.pTimer : 0;
  if (!is_pair(h)) return nw_ours_state(h, state, timer);
  struct pair_view v;
  if (!pair_get(h, &v, 0)) return NW_SUCCESS;
  if (v.ours) nw_ours_state(v.ours, state, timer);
  union nw_state_args_v3 a3;
  void *a;
  if (v.theirs && ctx_alive(v.ctx, v.ctx_gen) && their_state(abi, state, args, &a3, &a))
    their_record(v.theirs, state, a);
  return NW_SUCCESS;
}

nw_result_t nw_chain_finalize(void *ctx) {
  pthread_mutex_lock(&g_mu);
  struct ctx_view cv;
  if (!ctx_get(ctx, &cv)) {
    pthread_mutex_unlock(&g_mu);
    return pair_tag(ctx) == P_CTX ? NW_SUCCESS : nw_ours_finalize(ctx); /* a context that travelled alone */
  }
  struct ctx_pair *c = &g_ctx[cv.idx];
  /* Dead first: a stale event racing the finalize no longer reaches the chained plugin. */
  __atomic_store_n(&c->live, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&c->gen, c->gen + 1, __ATOMIC_RELEASE);
  if (cv.theirs) their_finalize(cv.theirs);
  nw_ours_finalize(cv.ours);
  /* Events NCCL never stopped: their slots go back to the free list. */
  spin_lock(&g_leaf_lock);
  for (uint32_t i = 0; i < NW_CHAIN_LEAVES; i++)
    if (g_leaf[i].live && g_leaf[i].ctx == cv.idx && g_leaf[i].ctx_gen == cv.gen) leaf_free_locked(&g_leaf[i]);
  spin_unlock(&g_leaf_lock);
  pthread_mutex_unlock(&g_mu);
  return NW_SUCCESS;
}
