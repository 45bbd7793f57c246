/*
 * Test driver for the profiler plugin: dlopens the .so and calls it the way NCCL does, through
 * each exported ncclProfiler_vN table, then leaves the region for heartbeat/profile's Go test
 * to read back and check. Usage:
 *
 *   driver PLUGIN.so SCENARIO VERSION [N]
 *
 * with NCCLWATCH_PROFILER_DIR set. Scenarios: basic, orders, threads, bench, overflow, burst,
 * disabled, fork, script. Prints "ok" on success; anything the driver can check by itself (masks,
 * handles) fails with exit status 1, what is in the region is the Go test's job.
 *
 * Chained (NCCLWATCH_PROFILER_CHAIN set: a second plugin, test/standin.c, beside the watchdog's),
 * the handles the driver gets are pairs, non-NULL whenever either plugin took the event, so the
 * checks that the watchdog gave no handle are left out. DRIVER_LOG=FILE writes every call that
 * must reach the chained plugin in the stand-in's own line format (see standin.c), numbering
 * events and contexts as it does, so that a test can compare the two files line by line; the
 * threads scenario instead prints its totals ("calls starts=N stops=N states=N").
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../abi.h"

#define WANT_MASK (NW_EV_GROUP | NW_EV_COLL | NW_EV_P2P | NW_EV_PROXY_OP | NW_EV_KERNEL_CH | NW_EV_PROXY_STEP)

static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "driver: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

/* NCCL's logger stand-in: prints what the plugin says, for the Go test to find. */
static void logger(int level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  (void)flags;
  (void)file;
  (void)line;
  va_list ap;
  va_start(ap, fmt);
  char buf[512];
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  printf("LOG %d %s\n", level, buf);
  fflush(stdout);
}

/* ---- one API over the four ABI versions ----------------------------------------------- */

static int ver;
static int mypid;
static int chain_mode; /* NCCLWATCH_PROFILER_CHAIN is set */

/* A check that the watchdog gave no handle: chained, the other plugin may have taken it. */
#define NO_HANDLE(h, ...)                                                                                            \
  do {                                                                                                               \
    if ((h) && !chain_mode) fail(__VA_ARGS__);                                                                       \
  } while (0)

/* ---- the calls a chained plugin must see, in its line format (DRIVER_LOG) ------------- */

static FILE *dlog;
static pthread_mutex_t dlog_mu = PTHREAD_MUTEX_INITIALIZER;
enum { HMAP = 1 << 17, MAX_CTXS = 256 };
static struct {
  void *h;
  long ev;
  int ctx;
  uint64_t type;
  int stopped;
} hmap[HMAP];
static struct {
  void *ctx;
  int live;
} ctxs[MAX_CTXS];
static int nctxs;
static long nevs;
static unsigned long long n_starts, n_stops, n_states; /* chained totals (threads) */

static unsigned hused;

static unsigned hslot(const void *h) {
  uint64_t x = (uint64_t)(uintptr_t)h * 0x9E3779B97F4A7C15ULL;
  unsigned i = (unsigned)(x >> 47) % HMAP;
  while (hmap[i].h && hmap[i].h != h) i = (i + 1) % HMAP;
  return i;
}

static int ctx_num(const void *ctx) {
  for (int i = nctxs - 1; i >= 0; i--)
    if (ctxs[i].ctx == ctx && ctxs[i].live) return i;
  return -1;
}

static void log_init(void *ctx, uint64_t id) {
  if (!ctx) return;
  if (nctxs < MAX_CTXS) ctxs[nctxs++] = (typeof(ctxs[0])){ctx, 1};
  if (dlog) fprintf(dlog, "init ctx=%d id=0x%llx\n", nctxs - 1, (unsigned long long)id);
}

static void log_fin(void *ctx) {
  int c = ctx_num(ctx);
  if (c < 0) return;
  ctxs[c].live = 0;
  if (dlog) fprintf(dlog, "fin ctx=%d\n", c);
}

static const char *tname(uint64_t t) {
  switch (t) {
  case NW_EV_GROUP: return "Group";
  case NW_EV_COLL: return "Coll";
  case NW_EV_P2P: return "P2p";
  case NW_EV_PROXY_OP: return "ProxyOp";
  case NW_EV_PROXY_STEP: return "ProxyStep";
  case NW_EV_PROXY_CTRL: return "ProxyCtrl";
  case NW_EV_KERNEL_CH: return "KernelCh";
  case NW_EV_NET_PLUGIN: return "NetPlugin";
  case NW_EV_COLL_API: return "CollApi";
  default: return "unknown";
  }
}

static int leaf_type(uint64_t t) { return t == NW_EV_PROXY_OP || t == NW_EV_PROXY_STEP || t == NW_EV_KERNEL_CH; }

struct ev;
static void log_start(void *ctx, const struct ev *e, void *h);
/* Without DRIVER_LOG (threads) only the totals are kept: every event reaches the chained
 * plugin there, and no table of handles would hold them. */
static void log_stop(void *h) {
  if (!chain_mode) return;
  if (!dlog) {
    if (h) __atomic_fetch_add(&n_stops, 1, __ATOMIC_RELAXED);
    return;
  }
  pthread_mutex_lock(&dlog_mu);
  unsigned i = hslot(h);
  if (h && hmap[i].h == h && ctxs[hmap[i].ctx].live && !(hmap[i].stopped && leaf_type(hmap[i].type))) {
    n_stops++;
    if (dlog) fprintf(dlog, "stop ev=%ld%s\n", hmap[i].ev, hmap[i].stopped ? " again" : "");
    hmap[i].stopped = 1;
  }
  pthread_mutex_unlock(&dlog_mu);
}

static void log_state(void *h, int st) {
  if (!chain_mode) return;
  if (!dlog) {
    if (h) __atomic_fetch_add(&n_states, 1, __ATOMIC_RELAXED);
    return;
  }
  pthread_mutex_lock(&dlog_mu);
  unsigned i = hslot(h);
  if (h && hmap[i].h == h && ctxs[hmap[i].ctx].live && !(hmap[i].stopped && leaf_type(hmap[i].type))) {
    n_states++;
    if (dlog) fprintf(dlog, "state ev=%ld st=%d\n", hmap[i].ev, st);
  }
  pthread_mutex_unlock(&dlog_mu);
}
/* v5/v6: garbage in the type's upper bytes, as an 8-bit type field with stack padding would
 * leave; the plugin must still see the event's type. */
static int type_garbage;
static struct nw_profiler_v3 *p3;
static struct nw_profiler_v4 *p4;
static struct nw_profiler_v5 *p5;
static struct nw_profiler_v6 *p6;

struct ev {
  uint64_t type;
  void *parent;
  int rank;
  uint64_t comm_hash, seq, count, timer;
  const char *func, *dtype, *algo, *proto;
  int root_or_peer, nch, pid, channel, nsteps, is_send, step;
};

/* A start the chained plugin gets: every one on a live context. Its parent by event number:
 * - none (or a value no start returned), x another process's proxy op's. */
static void log_start(void *ctx, const struct ev *e, void *h) {
  if (!dlog) {
    if (ctx) __atomic_fetch_add(&n_starts, 1, __ATOMIC_RELAXED);
    return;
  }
  pthread_mutex_lock(&dlog_mu);
  int c = ctx_num(ctx);
  /* An API event's type under garbage (type_garbage) is no event the chained plugin knows. */
  if (c < 0 || (type_garbage && e->type > 0xFF)) {
    pthread_mutex_unlock(&dlog_mu);
    return;
  }
  long ev = nevs++;
  n_starts++;
  if (dlog) {
    char parent[24] = "-";
    if (e->type == NW_EV_PROXY_OP && e->pid != 0 && e->pid != mypid && e->parent) {
      snprintf(parent, sizeof parent, "x");
    } else if (e->parent) {
      /* A parent of another communicator (a finalized one's) is none to the chained plugin. */
      unsigned i = hslot(e->parent);
      if (hmap[i].h == e->parent && hmap[i].ctx == c) snprintf(parent, sizeof parent, "%ld", hmap[i].ev);
    }
    char f[200] = "";
    switch (e->type) {
    case NW_EV_COLL:
      snprintf(f, sizeof f, " func=%s count=%llu dtype=%s root=%d nch=%d", e->func, (unsigned long long)e->count, e->dtype,
               e->root_or_peer, e->nch);
      break;
    case NW_EV_P2P:
      snprintf(f, sizeof f, " func=%s count=%llu dtype=%s peer=%d", e->func, (unsigned long long)e->count, e->dtype,
               e->root_or_peer);
      break;
    case NW_EV_PROXY_OP:
      snprintf(f, sizeof f, " peer=%d send=%d steps=%d ch=%d", e->root_or_peer, e->is_send, e->nsteps, e->channel);
      break;
    case NW_EV_PROXY_STEP: snprintf(f, sizeof f, " step=%d", e->step); break;
    case NW_EV_KERNEL_CH: snprintf(f, sizeof f, " ch=%d", e->channel); break;
    default: break;
    }
    fprintf(dlog, "start ctx=%d ev=%ld type=%s parent=%s%s\n", c, ev, tname(e->type), parent, f);
  }
  if (h) {
    if (++hused > HMAP / 2) fail("DRIVER_LOG: more than %d events", HMAP / 2);
    unsigned i = hslot(h);
    hmap[i].h = h;
    hmap[i].ev = ev;
    hmap[i].ctx = c;
    hmap[i].type = e->type;
    hmap[i].stopped = 0;
  }
  pthread_mutex_unlock(&dlog_mu);
}

static void load(const char *path, int v) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) fail("dlopen %s: %s", path, dlerror());
  char name[32];
  snprintf(name, sizeof name, "ncclProfiler_v%d", v);
  void *sym = dlsym(lib, name);
  if (!sym) fail("%s not exported", name);
  ver = v;
  switch (v) {
  case 3: p3 = sym; break;
  case 4: p4 = sym; break;
  case 5: p5 = sym; break;
  case 6: p6 = sym; break;
  default: fail("version %d", v);
  }
  const char *n = v == 3 ? p3->name : v == 4 ? p4->name : v == 5 ? p5->name : p6->name;
  if (!n || strcmp(n, "ncclwatch")) fail("plugin name %s", n ? n : "(null)");
}

static void *init(uint64_t id, int nnodes, int nranks, int rank, int want_mask) {
  void *ctx = NULL;
  int mask = -1, rc;
  switch (ver) {
  case 3: rc = p3->init(&ctx, &mask); break;
  case 4: rc = p4->init(&ctx, &mask, NULL, id, nnodes, nranks, rank, logger); break;
  case 5: rc = p5->init(&ctx, id, &mask, NULL, nnodes, nranks, rank, logger); break;
  default: rc = p6->init(&ctx, id, &mask, NULL, nnodes, nranks, rank, logger); break;
  }
  if (rc != 0) fail("init returned %d", rc);
  /* Chained, the mask NCCL gets also holds what the other plugin asked for. */
  if (chain_mode ? (mask & want_mask) != want_mask : mask != want_mask)
    fail("init mask 0x%x, want 0x%x", mask, want_mask);
  if (chain_mode) log_init(ctx, id);
  return ctx;
}

static void fin(void *ctx) {
  int rc = ver == 3 ? p3->finalize(ctx) : ver == 4 ? p4->finalize(ctx) : ver == 5 ? p5->finalize(ctx) : p6->finalize(ctx);
  if (rc) fail("finalize returned %d", rc);
  if (chain_mode) log_fin(ctx);
}

static void fill_coll_v4(struct nw_coll_v4 *c, const struct ev *e) {
  c->seqNumber = e->seq;
  c->func = e->func;
  c->count = e->count;
  c->root = e->root_or_peer;
  c->datatype = e->dtype;
  c->nChannels = (uint8_t)e->nch;
  c->algo = e->algo;
  c->proto = e->proto;
}

static void fill_p2p_v4(struct nw_p2p_v4 *p, const struct ev *e) {
  p->func = e->func;
  p->datatype = e->dtype;
  p->count = e->count;
  p->peer = e->root_or_peer;
  p->nChannels = (uint8_t)e->nch;
}

static void fill_proxy_op(struct nw_proxy_op *o, const struct ev *e) {
  o->pid = e->pid;
  o->channelId = (uint8_t)e->channel;
  o->peer = e->root_or_peer;
  o->nSteps = e->nsteps;
  o->isSend = e->is_send;
}

/* v5 and v6 share the members used here; the Group handle moves to parentGroup and a
 * Coll's parentObj is its (disabled) CollApi event, i.e. NULL. */
static void fill_v5(const struct ev *e, void **parentObj, struct nw_coll_v5 *coll, struct nw_p2p_v5 *p2p,
                    struct nw_proxy_op *op, int *step, struct nw_kernel_ch_v4 *kch) {
  *parentObj = (e->type == NW_EV_COLL || e->type == NW_EV_P2P) ? NULL : e->parent;
  if (e->type == NW_EV_COLL) {
    fill_coll_v4(&coll->v4, e);
    coll->parentGroup = e->parent;
  } else if (e->type == NW_EV_P2P) {
    fill_p2p_v4(&p2p->v4, e);
    p2p->parentGroup = e->parent;
  } else if (e->type == NW_EV_PROXY_OP) {
    fill_proxy_op(op, e);
  } else if (e->type == NW_EV_PROXY_STEP) {
    *step = e->step;
  } else if (e->type == NW_EV_KERNEL_CH) {
    kch->channelId = (uint8_t)e->channel;
    kch->pTimer = e->timer;
  }
}

/* Builds the descriptor of the loaded version. Members the type does not use hold garbage,
 * as in NCCL, where descriptors live on the stack. */
static void *start(void *ctx, const struct ev *e) {
  void *h = (void *)0x1; /* the plugin must overwrite it, NULL included */
  int rc;
  if (ver == 3) {
    struct nw_descr_v3 d;
    memset(&d, 0xAB, sizeof d);
    d.type = (uint8_t)e->type;
    d.parentObj = e->parent;
    d.rank = e->rank;
    if (e->type == NW_EV_COLL) {
      d.coll.name = NULL;
      d.coll.commHash = e->comm_hash;
      d.coll.seqNumber = e->seq;
      d.coll.func = e->func;
      d.coll.count = e->count;
      d.coll.root = e->root_or_peer;
      d.coll.datatype = e->dtype;
      d.coll.nMaxChannels = (uint8_t)e->nch;
      d.coll.algo = e->algo;
      d.coll.proto = e->proto;
    } else if (e->type == NW_EV_P2P) {
      d.p2p.name = NULL;
      d.p2p.commHash = e->comm_hash;
      d.p2p.func = e->func;
      d.p2p.datatype = e->dtype;
      d.p2p.count = e->count;
      d.p2p.peer = e->root_or_peer;
    } else if (e->type == NW_EV_PROXY_OP) {
      fill_proxy_op(&d.proxyOp, e);
    } else if (e->type == NW_EV_PROXY_STEP) {
      d.proxyStep.step = e->step;
    } else if (e->type == NW_EV_KERNEL_CH) {
      d.kernelCh.channelId = (uint8_t)e->channel;
    }
    rc = p3->startEvent(ctx, &h, &d);
  } else if (ver == 4) {
    struct nw_descr_v4 d;
    memset(&d, 0xAB, sizeof d);
    d.type = (uint8_t)e->type;
    d.parentObj = e->parent;
    d.rank = e->rank;
    if (e->type == NW_EV_COLL) {
      fill_coll_v4(&d.coll, e);
    } else if (e->type == NW_EV_P2P) {
      fill_p2p_v4(&d.p2p, e);
    } else if (e->type == NW_EV_PROXY_OP) {
      fill_proxy_op(&d.proxyOp, e);
    } else if (e->type == NW_EV_PROXY_STEP) {
      d.proxyStep.step = e->step;
    } else if (e->type == NW_EV_KERNEL_CH) {
      d.kernelCh.channelId = (uint8_t)e->channel;
      d.kernelCh.pTimer = e->timer;
    }
    rc = p4->startEvent(ctx, &h, &d);
  } else if (ver == 5) {
    struct nw_descr_v5 d;
    memset(&d, 0xAB, sizeof d);
    d.type = e->type | (type_garbage ? 0xABABABABABABAB00ULL : 0);
    d.rank = e->rank;
    fill_v5(e, &d.parentObj, &d.coll, &d.p2p, &d.proxyOp, &d.proxyStep.step, &d.kernelCh);
    rc = p5->startEvent(ctx, &h, &d);
  } else {
    struct nw_descr_v6 d;
    memset(&d, 0xAB, sizeof d);
    d.type = e->type | (type_garbage ? 0xABABABABABABAB00ULL : 0);
    d.rank = e->rank;
    fill_v5(e, &d.parentObj, &d.coll, &d.p2p, &d.proxyOp, &d.proxyStep.step, &d.kernelCh);
    rc = p6->startEvent(ctx, &h, &d);
  }
  if (rc) fail("startEvent returned %d", rc);
  if (h == (void *)0x1) fail("startEvent left the handle unset");
  if (chain_mode) log_start(ctx, e, h);
  return h;
}

static void stop(void *h) {
  log_stop(h);
  int rc = ver == 3 ? p3->stopEvent(h) : ver == 4 ? p4->stopEvent(h) : ver == 5 ? p5->stopEvent(h) : p6->stopEvent(h);
  if (rc) fail("stopEvent returned %d", rc);
}

static void state(void *h, int st, uint64_t timer, int null_args) {
  log_state(h, st);
  int rc;
  if (ver == 3) {
    union nw_state_args_v3 a = {.proxyOp = {.transSize = 1, .steps = 1}};
    rc = p3->recordEventState(h, st, null_args ? NULL : &a);
  } else {
    union nw_state_args_v4 a = {.kernelCh = {.pTimer = timer}};
    rc = ver == 4 ? p4->recordEventState(h, st, null_args ? NULL : &a)
         : ver == 5 ? p5->recordEventState(h, st, null_args ? NULL : &a)
                    : p6->recordEventState(h, st, null_args ? NULL : &a);
  }
  if (rc) fail("recordEventState returned %d", rc);
}

/* ---- NCCL-shaped sequences ------------------------------------------------------------ */

static void *group(void *ctx) {
  struct ev e = {.type = NW_EV_GROUP};
  void *g = start(ctx, &e);
  if (!g) fail("Group handle is NULL (NCCL 2.27 then skips the plan's Coll/P2p events)");
  return g;
}

static void *coll(void *ctx, void *grp, uint64_t hash, uint64_t seq, const char *func, uint64_t count, int nch) {
  struct ev e = {.type = NW_EV_COLL, .parent = grp, .rank = 1, .comm_hash = hash, .seq = seq, .func = func,
                 .count = count, .dtype = "ncclFloat32", .algo = "RING", .proto = "SIMPLE", .nch = nch};
  return start(ctx, &e);
}

static void *p2p(void *ctx, void *grp, uint64_t hash, const char *func, int peer, uint64_t count, int nch) {
  struct ev e = {.type = NW_EV_P2P, .parent = grp, .rank = 1, .comm_hash = hash, .func = func, .count = count,
                 .dtype = "ncclInt8", .root_or_peer = peer, .nch = nch};
  return start(ctx, &e);
}

static void *kch(void *ctx, void *task, int ch, uint64_t timer) {
  struct ev e = {.type = NW_EV_KERNEL_CH, .parent = task, .channel = ch, .timer = timer};
  return start(ctx, &e);
}

static void kch_stop(void *h, uint64_t timer) {
  state(h, NW_ST_KERNEL_CH_STOP, timer, 0);
  stop(h);
}

static void *pxop(void *ctx, void *task, int peer, int is_send, int nsteps, int ch) {
  struct ev e = {.type = NW_EV_PROXY_OP, .parent = task, .pid = mypid, .channel = ch, .root_or_peer = peer,
                 .nsteps = nsteps, .is_send = is_send};
  void *h = start(ctx, &e);
  if (h) state(h, NW_ST_PROXY_OP_IN_PROGRESS, 0, 0);
  return h;
}

/* One network step the way NCCL's net transport reports it, left open after `upto` states
 * when upto < 3. */
static void *step(void *ctx, void *op, int is_send, int n, int upto) {
  static const int send_st[3] = {NW_ST_STEP_SEND_GPU_WAIT, NW_ST_STEP_SEND_PEER_WAIT, NW_ST_STEP_SEND_WAIT};
  static const int recv_st[3] = {NW_ST_STEP_RECV_WAIT, NW_ST_STEP_RECV_FLUSH_WAIT, NW_ST_STEP_RECV_GPU_WAIT};
  struct ev e = {.type = NW_EV_PROXY_STEP, .parent = op, .step = n};
  void *h = start(ctx, &e);
  for (int i = 0; i < 3 && i < upto; i++) state(h, is_send ? send_st[i] : recv_st[i], 0, 0);
  if (upto >= 3) stop(h);
  return h;
}

/* A collective that runs to completion: the Coll stops right after enqueue (as in 2.28),
 * then its kernel channels and one send and one receive proxy op run. */
static void full_coll(void *ctx, uint64_t hash, uint64_t seq, uint64_t count, int send_peer, int recv_peer, int nsteps) {
  void *g = group(ctx);
  void *c = coll(ctx, g, hash, seq, "AllReduce", count, 2);
  stop(c);
  stop(g);
  void *k0 = kch(ctx, c, 0, 1000 + seq), *k1 = kch(ctx, c, 1, 1001 + seq);
  void *s = pxop(ctx, c, send_peer, 1, nsteps, 0), *r = pxop(ctx, c, recv_peer, 0, nsteps, 1);
  for (int i = 0; i < nsteps; i++) {
    step(ctx, s, 1, i, 3);
    step(ctx, r, 0, i, 3);
  }
  stop(s);
  stop(r);
  kch_stop(k0, 2000);
  kch_stop(k1, 2001);
}

static void full_p2p(void *ctx, uint64_t hash, const char *func, int peer, int nsteps) {
  void *g = group(ctx);
  void *t = p2p(ctx, g, hash, func, peer, 4096, 1);
  stop(t);
  stop(g);
  void *k = kch(ctx, t, 0, 5000);
  int is_send = func[0] == 'S';
  void *op = pxop(ctx, t, peer, is_send, nsteps, 3);
  for (int i = 0; i < nsteps; i++) step(ctx, op, is_send, i, 3);
  stop(op);
  kch_stop(k, 5001);
}

/* ---- scenarios ------------------------------------------------------------------------ */

/* The region the Go test expects (TestDriverBasic): two collectives and a send/recv pair to
 * peer 3 done, a third collective hung in flight with open proxy ops to peers 2 and 0, and a
 * second send to peer 3 queued behind it. */
static void basic(void) {
  const uint64_t id = 0xA1A2A3A4A5A6A7A8ULL;
  void *ctx = init(id, 2, 4, 1, WANT_MASK);
  full_coll(ctx, id, 0, 1000, 2, 0, 4);
  full_coll(ctx, id, 1, 2000, 2, 0, 4);
  full_p2p(ctx, id, "Send", 3, 2);
  full_p2p(ctx, id, "Recv", 3, 2);

  void *g = group(ctx);
  void *c = coll(ctx, g, id, 2, "AllReduce", 3000, 2);
  stop(c);
  stop(g);
  kch(ctx, c, 0, 12345);
  kch(ctx, c, 1, 12346);
  void *s = pxop(ctx, c, 2, 1, 4, 0), *r = pxop(ctx, c, 0, 0, 4, 1);
  step(ctx, s, 1, 0, 3);
  step(ctx, s, 1, 1, 2); /* waits for peer 2 to post its receive */
  step(ctx, r, 0, 0, 1); /* waits for data from peer 0 */

  g = group(ctx);
  void *t = p2p(ctx, g, id, "Send", 3, 8192, 1);
  stop(t);
  stop(g);

  /* A second communicator that comes and goes: its slot must be free again. */
  void *other = init(0xB0B0, 1, 2, 0, WANT_MASK);
  full_coll(other, 0xB0B0, 0, 10, 1, 1, 1);
  fin(other);
}

/* Orders NCCL can produce, and handles that are stale, NULL or foreign. */
static void orders(void) {
  const uint64_t id = 0xC0FFEE;
  void *ctx = init(id, 1, 2, 1, WANT_MASK);

  /* Parent stopped only after its children (older NCCL stopped a Coll when its work ended). */
  void *g = group(ctx);
  void *c = coll(ctx, g, id, 0, "Broadcast", 64, 1);
  void *k = kch(ctx, c, 0, 1);
  void *s = pxop(ctx, c, 0, 1, 1, 0);
  step(ctx, s, 1, 0, 3);
  stop(s);
  kch_stop(k, 2);
  stop(c);
  stop(g);

  /* Children stopped long after the parent; kernel channels of a later plan start first, so
   * the earlier op is known finished and its late channel stop must be ignored. */
  g = group(ctx);
  void *c1 = coll(ctx, g, id, 0, "AllGather", 64, 1);
  stop(c1);
  stop(g);
  void *k1 = kch(ctx, c1, 0, 3);
  g = group(ctx);
  void *c2 = coll(ctx, g, id, 0, "AllReduce", 64, 1);
  stop(c2);
  stop(g);
  void *k2 = kch(ctx, c2, 0, 4);
  kch_stop(k2, 5);
  kch_stop(k1, 6);
  stop(k1); /* a second stop of the same handle */
  stop(c1);

  /* NULL and foreign handles and parents. */
  stop(NULL);
  state(NULL, NW_ST_PROXY_OP_IN_PROGRESS, 0, 1);
  stop((void *)(uintptr_t)0xdeadbeef0ULL);
  stop((void *)(uintptr_t)0xFF3ULL); /* a task tag with an impossible comm slot */
  int on_stack = 0;
  stop(&on_stack);
  state(&on_stack, NW_ST_STEP_SEND_WAIT, 0, 1);
  NO_HANDLE(kch(ctx, NULL, 0, 1), "KernelCh without a parent got a handle");
  NO_HANDLE(kch(ctx, &on_stack, 0, 1), "KernelCh with a foreign parent got a handle");
  struct ev foreign = {.type = NW_EV_PROXY_OP, .parent = c2, .pid = mypid + 1, .root_or_peer = 0, .nsteps = 2, .is_send = 1};
  void *fop = start(ctx, &foreign); /* posted by another process: parent not followed */
  stop(fop);
  struct ev st = {.type = NW_EV_PROXY_STEP, .parent = NULL};
  NO_HANDLE(start(ctx, &st), "ProxyStep without a parent got a handle");
  struct ev unknown = {.type = NW_EV_PROXY_CTRL};
  NO_HANDLE(start(ctx, &unknown), "ProxyCtrl got a handle");
  unknown.type = NW_EV_NET_PLUGIN;
  NO_HANDLE(start(ctx, &unknown), "NetPlugin got a handle");
  if (ver >= 5) {
    unknown.type = NW_EV_COLL_API;
    NO_HANDLE(start(ctx, &unknown), "CollApi got a handle");
  }
  NO_HANDLE(start(NULL, &unknown), "a NULL context got a handle");

  /* State records with NULL arguments, as NCCL does for some states. */
  g = group(ctx);
  void *c3 = coll(ctx, g, id, 1, "AllReduce", 128, 1);
  stop(c3);
  stop(g);
  void *k3 = kch(ctx, c3, 0, 7);
  state(k3, NW_ST_KERNEL_CH_STOP, 0, 1);
  stop(k3);

  /* Finalize with events open, then NCCL's late calls on them, then a new comm in the slot. */
  g = group(ctx);
  void *open_c = coll(ctx, g, id, 2, "AllReduce", 256, 2);
  void *open_k = kch(ctx, open_c, 0, 8);
  void *open_s = pxop(ctx, open_c, 0, 1, 4, 0);
  void *open_step = step(ctx, open_s, 1, 0, 1);
  fin(ctx);
  stop(open_c);
  stop(g);
  kch_stop(open_k, 9);
  state(open_step, NW_ST_STEP_SEND_WAIT, 0, 0);
  stop(open_step);
  stop(open_s);
  NO_HANDLE(kch(ctx, open_c, 1, 10), "event on a finalized comm got a handle");
  fin(ctx); /* finalize twice */

  void *ctx2 = init(0xD00D, 1, 2, 0, WANT_MASK);
  kch(ctx2, open_c, 1, 11);  /* old handles must not land in the new comm */
  stop(open_c);
  stop(open_s);
  type_garbage = ver >= 5;
  full_coll(ctx2, 0xD00D, 0, 10, 1, 1, 2);
  if (type_garbage) {
    struct ev api = {.type = NW_EV_COLL_API};
    NO_HANDLE(start(ctx2, &api), "CollApi with garbage above its bit got a handle");
  }
  type_garbage = 0;
}

struct queue {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  void *items[64];
  unsigned head, tail;
  int closed;
};

static void q_put(struct queue *q, void *v) {
  pthread_mutex_lock(&q->mu);
  while (q->tail - q->head == 64) pthread_cond_wait(&q->cv, &q->mu);
  q->items[q->tail++ % 64] = v;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

static int q_get(struct queue *q, void **v) {
  pthread_mutex_lock(&q->mu);
  while (q->head == q->tail && !q->closed) pthread_cond_wait(&q->cv, &q->mu);
  int ok = q->head != q->tail;
  if (ok) *v = q->items[q->head++ % 64];
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
  return ok;
}

static void q_close(struct queue *q) {
  pthread_mutex_lock(&q->mu);
  q->closed = 1;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

/* Per comm, NCCL's three callers at once: the user thread issues, the proxy thread runs
 * network ops and steps, a third thread (NCCL 2.29's profiler thread) reports kernel
 * channels. Tasks travel to the other two through bounded queues, like NCCL's own. */
struct comm_run {
  void *ctx;
  uint64_t id;
  int n;
  struct queue to_proxy, to_kernel;
};

static void *user_thread(void *arg) {
  struct comm_run *r = arg;
  for (int i = 0; i < r->n; i++) {
    void *g = group(r->ctx);
    void *t = (i % 4 == 3) ? p2p(r->ctx, g, r->id, (i % 8 == 3) ? "Send" : "Recv", 1, 64, 1)
                           : coll(r->ctx, g, r->id, (uint64_t)i, "AllReduce", 1024, 2);
    q_put(&r->to_kernel, t);
    q_put(&r->to_proxy, t);
    stop(t);
    stop(g);
  }
  q_close(&r->to_kernel);
  q_close(&r->to_proxy);
  return NULL;
}

static void *proxy_thread(void *arg) {
  struct comm_run *r = arg;
  void *t;
  while (q_get(&r->to_proxy, &t)) {
    void *s = pxop(r->ctx, t, 1, 1, 2, 0), *v = pxop(r->ctx, t, 2, 0, 2, 1);
    for (int i = 0; i < 2; i++) {
      step(r->ctx, s, 1, i, 3);
      step(r->ctx, v, 0, i, 3);
    }
    stop(s);
    stop(v);
  }
  return NULL;
}

static void *kernel_thread(void *arg) {
  struct comm_run *r = arg;
  void *t;
  while (q_get(&r->to_kernel, &t)) {
    void *k0 = kch(r->ctx, t, 0, 1), *k1 = kch(r->ctx, t, 1, 2);
    kch_stop(k0, 3);
    kch_stop(k1, 4);
  }
  return NULL;
}

static void threads(int comms, int n) {
  struct comm_run *runs = calloc((size_t)comms, sizeof *runs);
  pthread_t *th = calloc((size_t)comms * 3, sizeof *th);
  if (!runs || !th) fail("calloc");
  for (int i = 0; i < comms; i++) {
    runs[i].id = 0x7000 + (uint64_t)i;
    runs[i].n = n;
    runs[i].ctx = init(runs[i].id, 1, 4, 0, WANT_MASK);
    pthread_mutex_init(&runs[i].to_proxy.mu, NULL);
    pthread_cond_init(&runs[i].to_proxy.cv, NULL);
    pthread_mutex_init(&runs[i].to_kernel.mu, NULL);
    pthread_cond_init(&runs[i].to_kernel.cv, NULL);
  }
  for (int i = 0; i < comms; i++) {
    pthread_create(&th[3 * i], NULL, user_thread, &runs[i]);
    pthread_create(&th[3 * i + 1], NULL, proxy_thread, &runs[i]);
    pthread_create(&th[3 * i + 2], NULL, kernel_thread, &runs[i]);
  }
  for (int i = 0; i < 3 * comms; i++) pthread_join(th[i], NULL);
  free(runs);
  free(th);
}

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The cost per plugin call on one thread, for the collective of full_coll (2 channels, one
 * send and one receive op of `nsteps` steps); steps can be switched off by the environment. */
static void bench(int n) {
  const uint64_t id = 0xBE7C4;
  int mask = WANT_MASK;
  const char *steps = getenv("NCCLWATCH_PROFILER_STEPS");
  if (steps && !strcmp(steps, "0")) mask &= ~NW_EV_PROXY_STEP;
  void *ctx = init(id, 1, 4, 0, mask);
  int nsteps = 4;
  uint64_t t0 = mono_ns();
  for (int i = 0; i < n; i++) full_coll(ctx, id, (uint64_t)i, 1024, 1, 2, (mask & NW_EV_PROXY_STEP) ? nsteps : 0);
  uint64_t dt = mono_ns() - t0;
  /* group 2 + coll 2 + 2 channels x 3 + 2 ops x 3 + steps x 2 ops x (start, 3 states, stop) */
  uint64_t calls_per = 16 + ((mask & NW_EV_PROXY_STEP) ? (uint64_t)nsteps * 2 * 5 : 0);
  printf("bench calls %llu ns_per_call %.1f ns_per_collective %.1f\n", (unsigned long long)(calls_per * (uint64_t)n),
         (double)dt / (double)(calls_per * (uint64_t)n), (double)dt / n);
}

/* Past every bound: 70 comms for 64 slots, 70 peers for 64 rows, 300 unfinished collectives
 * for a ring of 256 (the last 44 share the 256th entry) and then a send that cannot share it,
 * 1100 open proxy ops for a pool of 1024. */
static void overflow(void) {
  void *ctx[70];
  for (int i = 0; i < 70; i++) ctx[i] = init(0x9000 + (uint64_t)i, 1, 128, 0, WANT_MASK);
  for (int i = 64; i < 70; i++) {
    /* A dropped comm gets no Group handle, so NCCL 2.27 skips the plan's events at once. */
    struct ev e = {.type = NW_EV_GROUP};
    NO_HANDLE(start(ctx[i], &e), "a dropped comm got a Group handle");
    NO_HANDLE(coll(ctx[i], NULL, 0, 0, "AllReduce", 1, 1), "a dropped comm got a Coll handle");
  }
  for (int peer = 0; peer < 70; peer++) full_p2p(ctx[0], 0, "Send", peer + 1, 1);
  void *last = NULL;
  for (int i = 0; i < 300; i++) {
    void *g = group(ctx[1]);
    void *c = coll(ctx[1], g, 0, (uint64_t)i, "AllReduce", 1, 1);
    if (!c) fail("op %d: no handle", i);
    if (i >= 256 && last && c != last && !chain_mode) fail("op %d past the ring did not share the newest entry", i);
    last = c;
    stop(c);
    stop(g);
  }
  void *g1 = group(ctx[1]);
  NO_HANDLE(p2p(ctx[1], g1, 0, "Send", 1, 1, 1), "a send past a ring full of collectives got a handle");
  stop(g1);
  void *g = group(ctx[2]);
  void *c = coll(ctx[2], g, 0, 0, "AllReduce", 1, 1);
  for (int i = 0; i < 1100; i++) {
    void *op = pxop(ctx[2], c, 1, i & 1, 2, i % 32);
    if ((i < 1024) != (op != NULL) && !(chain_mode && op)) fail("proxy op %d: handle %p", i, op);
  }
  for (int i = 3; i < 70; i++) fin(ctx[i]);
  void *late = init(0x9999, 1, 2, 0, WANT_MASK); /* lands in a slot freed above */
  full_coll(late, 0x9999, 0, 1, 1, 1, 1);
}

/* The smoke run's pattern (docs/validation-runs/2026-11-23-plugin-smoke: 126-128 events
 * dropped per rank with the first plugin): PyTorch issues 300 small all-reduces back to back
 * while each takes milliseconds on the GPU over NET/Socket, and NCCL posts each one's send and
 * receive proxy ops at launch. The queue thus holds 300 ops and 600 proxy ops before the first
 * completes; the first plugin tracked 256 ops and 512 proxy ops and dropped the rest
 * (44 + 88 = 132, less the few the GPU finished during the burst). Then `done` ops run in
 * order: kernel channel, one network step each way, proxy ops and channel stop. */
static void burst(int done) {
  const uint64_t id = 0xB0257;
  enum { N = 300 };
  void *ctx = init(id, 2, 2, 0, WANT_MASK);
  static void *task[N], *send[N], *recv[N];
  for (int i = 0; i < N; i++) {
    void *g = group(ctx);
    task[i] = coll(ctx, g, id, (uint64_t)i, "AllReduce", 1024, 1);
    stop(task[i]);
    stop(g);
    send[i] = pxop(ctx, task[i], 1, 1, 1, 0);
    recv[i] = pxop(ctx, task[i], 1, 0, 1, 0);
  }
  for (int i = 0; i < done && i < N; i++) {
    void *k = kch(ctx, task[i], 0, 100 + (uint64_t)i);
    step(ctx, send[i], 1, 0, 3);
    step(ctx, recv[i], 0, 0, 3);
    stop(send[i]);
    stop(recv[i]);
    kch_stop(k, 200 + (uint64_t)i);
  }
}

/* Recording off (NCCLWATCH_PROFILER=0 or an unusable directory): NCCL gets mask 0 and
 * harmless answers everywhere. */
static void disabled(void) {
  void *ctx = init(0x1, 1, 2, 0, 0);
  struct ev e = {.type = NW_EV_GROUP};
  NO_HANDLE(start(ctx, &e), "a disabled plugin returned a handle");
  stop(NULL);
  fin(ctx);
}

/* A child forked after NCCL started writes its own region, not its parent's. */
static void forked(void) {
  void *ctx = init(0xF0, 1, 2, 0, WANT_MASK);
  full_coll(ctx, 0xF0, 0, 1, 1, 1, 1);
  pid_t child = fork();
  if (child < 0) fail("fork");
  if (child == 0) {
    mypid = getpid();
    void *c2 = init(0xF1, 1, 2, 1, WANT_MASK);
    for (int i = 0; i < 3; i++) full_coll(c2, 0xF1, (uint64_t)i, 1, 0, 0, 1);
    printf("child %d\n", (int)mypid);
    fflush(stdout);
    _exit(0);
  }
  int st;
  if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st)) fail("child failed");
  full_coll(ctx, 0xF0, 1, 1, 1, 1, 1);
}

/* A rank under the tests' control: commands on stdin, one per line, the process alive until
 * stdin ends (a test kills it to play a crash). Ops and proxy ops are numbered in the order
 * the script creates them, from 0.
 *
 *   init C ID NRANKS RANK       communicator C (0-15)
 *   coll C FUNC COUNT NCH       issue a collective (its Group and Coll stop at once, as in 2.28)
 *   p2p C FUNC PEER COUNT       issue a Send or Recv (one channel)
 *   start O / end O             op O's kernel channels start / stop
 *   px O PEER SEND NSTEPS CH    a proxy op of op O with PEER (SEND 1 or 0)
 *   step X N UPTO [MS]          step N of proxy op X through UPTO of its 3 states, ended at 3
 *                               (MS milliseconds after its last state: time on the network)
 *   pxend X                     proxy op X ends
 *   run O PEER NSTEPS           op O runs to completion: start, a send and a receive proxy op
 *                               with PEER of NSTEPS steps each, end
 *   sleep MS
 *   fin C
 *   sync                        print "sync N": everything above is in the region
 */
enum { S_COMMS = 16, S_OPS = 8192, S_PX = 16384, S_CH = 8 };
static struct {
  void *ctx;
  uint64_t id;
} s_comm[S_COMMS];
static struct {
  int comm, nch;
  void *task, *kch[S_CH];
} s_op[S_OPS];
static struct {
  int comm, send;
  void *h;
} s_px[S_PX];
static int s_nops, s_npx;

static int s_opnum(int o) {
  if (o < 0 || o >= s_nops) fail("script: no op %d", o);
  return o;
}

static void s_start(int o) {
  for (int i = 0; i < s_op[o].nch; i++)
    s_op[o].kch[i] = kch(s_comm[s_op[o].comm].ctx, s_op[o].task, i, 1000 + (uint64_t)o);
}

static void s_end(int o) {
  for (int i = 0; i < s_op[o].nch; i++)
    if (s_op[o].kch[i]) kch_stop(s_op[o].kch[i], 2000 + (uint64_t)o);
}

static int s_px_open(int o, int peer, int send, int nsteps, int ch) {
  if (s_npx == S_PX) fail("script: too many proxy ops");
  int x = s_npx++;
  s_px[x].comm = s_op[o].comm;
  s_px[x].send = send;
  s_px[x].h = pxop(s_comm[s_op[o].comm].ctx, s_op[o].task, peer, send, nsteps, ch);
  return x;
}

static void script(void) {
  char line[256], a[64];
  int syncs = 0;
  while (fgets(line, sizeof line, stdin)) {
    int c, n1, n2, n3, n4;
    unsigned long long id;
    if (sscanf(line, "init %d %llx %d %d", &c, &id, &n1, &n2) == 4) {
      if (c < 0 || c >= S_COMMS) fail("script: comm %d", c);
      s_comm[c].id = id;
      s_comm[c].ctx = init(id, 1, n1, n2, WANT_MASK);
    } else if (sscanf(line, "coll %d %63s %d %d", &c, a, &n1, &n2) == 4 ||
               sscanf(line, "p2p %d %63s %d %d", &c, a, &n3, &n1) == 4) {
      int is_p2p = line[0] == 'p';
      if (c < 0 || c >= S_COMMS || !s_comm[c].ctx || s_nops == S_OPS) fail("script: %s", line);
      int o = s_nops++;
      void *g = group(s_comm[c].ctx);
      static char funcs[S_OPS][16];
      snprintf(funcs[o], sizeof funcs[o], "%.15s", a);
      s_op[o].comm = c;
      s_op[o].nch = is_p2p ? 1 : (n2 < 1 ? 1 : n2 > S_CH ? S_CH : n2);
      s_op[o].task = is_p2p ? p2p(s_comm[c].ctx, g, s_comm[c].id, funcs[o], n3, (uint64_t)n1, 1)
                            : coll(s_comm[c].ctx, g, s_comm[c].id, (uint64_t)o, funcs[o], (uint64_t)n1, s_op[o].nch);
      stop(s_op[o].task);
      stop(g);
    } else if (sscanf(line, "start %d", &n1) == 1) {
      s_start(s_opnum(n1));
    } else if (sscanf(line, "end %d", &n1) == 1) {
      s_end(s_opnum(n1));
    } else if (sscanf(line, "px %d %d %d %d %d", &n1, &n2, &n3, &n4, &c) == 5) {
      s_px_open(s_opnum(n1), n2, n3, n4, c);
    } else if ((n4 = 0, sscanf(line, "step %d %d %d %d", &n1, &n2, &n3, &n4)) >= 3) {
      if (n1 < 0 || n1 >= s_npx) fail("script: no proxy op %d", n1);
      void *ctx = s_comm[s_px[n1].comm].ctx;
      void *h = step(ctx, s_px[n1].h, s_px[n1].send, n2, n3 >= 3 && n4 > 0 ? 2 : n3);
      if (n3 >= 3 && n4 > 0) { /* the last state, MS on the network, then the end */
        state(h, s_px[n1].send ? NW_ST_STEP_SEND_WAIT : NW_ST_STEP_RECV_GPU_WAIT, 0, 0);
        struct timespec ts = {n4 / 1000, (long)(n4 % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        stop(h);
      }
    } else if (sscanf(line, "pxend %d", &n1) == 1) {
      if (n1 < 0 || n1 >= s_npx) fail("script: no proxy op %d", n1);
      stop(s_px[n1].h);
    } else if (sscanf(line, "run %d %d %d", &n1, &n2, &n3) == 3) {
      int o = s_opnum(n1);
      s_start(o);
      int sx = s_px_open(o, n2, 1, n3, 0), rx = s_px_open(o, n2, 0, n3, 0);
      for (int i = 0; i < n3; i++) {
        step(s_comm[s_op[o].comm].ctx, s_px[sx].h, 1, i, 3);
        step(s_comm[s_op[o].comm].ctx, s_px[rx].h, 0, i, 3);
      }
      stop(s_px[sx].h);
      stop(s_px[rx].h);
      s_end(o);
    } else if (sscanf(line, "sleep %d", &n1) == 1) {
      struct timespec ts = {n1 / 1000, (long)(n1 % 1000) * 1000000L};
      nanosleep(&ts, NULL);
    } else if (sscanf(line, "fin %d", &c) == 1) {
      if (c < 0 || c >= S_COMMS || !s_comm[c].ctx) fail("script: %s", line);
      fin(s_comm[c].ctx);
      s_comm[c].ctx = NULL;
    } else if (!strncmp(line, "sync", 4)) {
      printf("sync %d\n", ++syncs);
      fflush(stdout);
    } else if (line[0] != '\n' && line[0] != '#') {
      fail("script: cannot read %s", line);
    }
  }
}

int main(int argc, char **argv) {
  if (argc < 4) fail("usage: driver PLUGIN.so SCENARIO VERSION [N]");
  mypid = getpid();
  const char *chain = getenv("NCCLWATCH_PROFILER_CHAIN");
  chain_mode = chain && *chain;
  const char *dl = getenv("DRIVER_LOG");
  if (chain_mode && dl && *dl && !(dlog = fopen(dl, "w"))) fail("cannot write %s", dl);
  load(argv[1], atoi(argv[3]));
  int n = argc > 4 ? atoi(argv[4]) : 1000;
  const char *s = argv[2];
  if (!strcmp(s, "basic")) basic();
  else if (!strcmp(s, "orders")) orders();
  else if (!strcmp(s, "threads")) threads(4, n);
  else if (!strcmp(s, "bench")) bench(n);
  else if (!strcmp(s, "overflow")) overflow();
  else if (!strcmp(s, "burst")) burst(n);
  else if (!strcmp(s, "script")) script();
  else if (!strcmp(s, "disabled")) disabled();
  else if (!strcmp(s, "fork")) forked();
  else fail("unknown scenario %s", s);
  if (dlog) fclose(dlog);
  if (chain_mode) printf("calls starts=%llu stops=%llu states=%llu\n", n_starts, n_stops, n_states);
  printf("ok %s v%d pid %d\n", s, ver, mypid);
  return 0;
}
