/*
 * Micro-benchmark of the profiler plugin's hot path: dlopens a plugin and calls its
 * ncclProfiler_v5 table the way NCCL 2.28 does for a collective, phase by phase, and prints
 * the nanoseconds each kind of call costs on this CPU. No GPU: it answers "where does the
 * plugin's time go" for every event NCCL hands it.
 *
 *   microbench [PLUGIN.so|none] [BATCHES] [ROUNDS]
 *
 * with NCCLWATCH_PROFILER_DIR set for the ncclwatch plugin. "none" is a built-in table whose
 * calls do nothing: the floor of an indirect call with NCCL's arguments. A batch is 32
 * collectives, each the way NCCL reports it: Group start, Coll start, Coll stop, Group stop
 * (the enqueue path, on the thread that calls ncclAllReduce), then on NCCL's proxy thread 2
 * kernel channels, a send and a receive proxy op of 4 network steps each (start, 3 states,
 * stop), the channels' stop state and stop. Phases run one after the other over the whole
 * batch and are timed as a block, so the clock is read twice per phase, not per call. Each
 * figure is the best round's (the machine is shared: the best is the least disturbed) and the
 * median round's. Event kinds outside the mask the plugin asked for are not called, as NCCL
 * would not call them (NCCLWATCH_PROFILER_STEPS=0: no steps).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../abi.h"

enum { B = 32, NCH = 2, NSTEPS = 4 };

static nw_result_t none_init(void **ctx, uint64_t id, int *mask, const char *name, int nnodes, int nranks, int rank,
                             nw_logger_t logfn) {
  (void)id, (void)name, (void)nnodes, (void)nranks, (void)rank, (void)logfn;
  *ctx = (void *)0x10;
  *mask = NW_EV_GROUP | NW_EV_COLL | NW_EV_P2P | NW_EV_PROXY_OP | NW_EV_PROXY_STEP | NW_EV_KERNEL_CH;
  return 0;
}
static nw_result_t none_start(void *ctx, void **h, struct nw_descr_v5 *d) {
  (void)ctx;
  *h = (void *)(uintptr_t)(d->type | 0x100);
  return 0;
}
static nw_result_t none_stop(void *h) {
  (void)h;
  return 0;
}
static nw_result_t none_state(void *h, int st, nw_state_args_v5 *a) {
  (void)h, (void)st, (void)a;
  return 0;
}
static nw_result_t none_fin(void *ctx) {
  (void)ctx;
  return 0;
}
static struct nw_profiler_v5 none_table = {"none", none_init, none_start, none_stop, none_state, none_fin};

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

enum phase {
  P_GROUP_START, P_COLL_START, P_COLL_STOP, P_GROUP_STOP, P_KCH_START, P_PX_START, P_PX_STATE, P_STEP_START,
  P_STEP_STATE, P_STEP_STOP, P_PX_STOP, P_KCH_STATE, P_KCH_STOP, P_P2P_START, P_P2P_STOP, NPHASES
};
static const char *phase_name[NPHASES] = {
  "Group start", "Coll start", "Coll stop", "Group stop", "KernelCh start", "ProxyOp start", "ProxyOp state",
  "ProxyStep start", "ProxyStep state", "ProxyStep stop", "ProxyOp stop", "KernelCh state", "KernelCh stop",
  "P2p start", "P2p stop"};

static struct nw_profiler_v5 *t;
static void *ctx;
static int mask;
static const char *phase_fn[NPHASES] = {
  "ph_group_start", "ph_coll_start", "ph_coll_stop", "ph_group_stop", "ph_kch_start", "ph_px_start", "ph_px_state",
  "ph_step_start", "ph_step_state", "ph_step_stop", "ph_px_stop", "ph_kch_state", "ph_kch_stop", "ph_p2p_start",
  "ph_p2p_stop"};
static uint64_t ns[NPHASES], calls[NPHASES], all_calls[NPHASES];

static void start(void **h, struct nw_descr_v5 *d) {
  if (t->startEvent(ctx, h, d)) exit(2);
}

/* One batch's descriptors and handles. Each phase is a function of its own (never inlined), so
 * that callgrind's inclusive count of ph_<phase> divided by its calls is the instructions one
 * call of that kind costs: `make bench-plugin-instr`, exact where timings on a shared machine
 * are not. */
static struct nw_descr_v5 gd[B], cd[B], kd[B][NCH], pd[B][2], sd[B][2][NSTEPS], p2d[B][2], g2d[B];
static void *g[B], *c[B], *k[B][NCH], *px[B][2], *st[B][2][NSTEPS], *g2[B], *pp[B][2];
static nw_state_args_v5 args;
static uint64_t seq0;
static int steps;

#define PHASE(name) static __attribute__((noinline)) void ph_##name(void)
PHASE(group_start) { for (int i = 0; i < B; i++) start(&g[i], &gd[i]); }
PHASE(coll_start) { for (int i = 0; i < B; i++) start(&c[i], &cd[i]); }
PHASE(coll_stop) { for (int i = 0; i < B; i++) t->stopEvent(c[i]); }
PHASE(group_stop) { for (int i = 0; i < B; i++) t->stopEvent(g[i]); }
PHASE(kch_start) { for (int i = 0; i < B; i++) for (int ch = 0; ch < NCH; ch++) start(&k[i][ch], &kd[i][ch]); }
PHASE(px_start) { for (int i = 0; i < B; i++) for (int s = 0; s < 2; s++) start(&px[i][s], &pd[i][s]); }
PHASE(px_state) {
  for (int i = 0; i < B; i++)
    for (int s = 0; s < 2; s++) t->recordEventState(px[i][s], NW_ST_PROXY_OP_IN_PROGRESS, &args);
}
PHASE(step_start) {
  for (int i = 0; i < B; i++)
    for (int s = 0; s < 2; s++)
      for (int n = 0; n < NSTEPS; n++) start(&st[i][s][n], &sd[i][s][n]);
}
PHASE(step_state) {
  static const int send_st[3] = {NW_ST_STEP_SEND_GPU_WAIT, NW_ST_STEP_SEND_PEER_WAIT, NW_ST_STEP_SEND_WAIT};
  static const int recv_st[3] = {NW_ST_STEP_RECV_WAIT, NW_ST_STEP_RECV_FLUSH_WAIT, NW_ST_STEP_RECV_GPU_WAIT};
  for (int i = 0; i < B; i++)
    for (int s = 0; s < 2; s++)
      for (int n = 0; n < NSTEPS; n++)
        for (int x = 0; x < 3; x++) t->recordEventState(st[i][s][n], s == 0 ? send_st[x] : recv_st[x], &args);
}
PHASE(step_stop) {
  for (int i = 0; i < B; i++)
    for (int s = 0; s < 2; s++)
      for (int n = 0; n < NSTEPS; n++) t->stopEvent(st[i][s][n]);
}
PHASE(px_stop) { for (int i = 0; i < B; i++) for (int s = 0; s < 2; s++) t->stopEvent(px[i][s]); }
PHASE(kch_state) {
  for (int i = 0; i < B; i++)
    for (int ch = 0; ch < NCH; ch++) {
      args.kernelCh.pTimer = 2000000 + seq0 + (uint64_t)i;
      t->recordEventState(k[i][ch], NW_ST_KERNEL_CH_STOP, &args);
    }
}
PHASE(kch_stop) { for (int i = 0; i < B; i++) for (int ch = 0; ch < NCH; ch++) t->stopEvent(k[i][ch]); }
PHASE(p2p_start) { for (int i = 0; i < B; i++) for (int s = 0; s < 2; s++) start(&pp[i][s], &p2d[i][s]); }
PHASE(p2p_stop) { for (int i = 0; i < B; i++) for (int s = 0; s < 2; s++) t->stopEvent(pp[i][s]); }

static void timed(enum phase p, uint64_t n, void (*fn)(void)) {
  uint64_t t0 = mono_ns();
  fn();
  ns[p] += mono_ns() - t0;
  calls[p] += n;
  all_calls[p] += n;
}

/* One batch of B collectives and B send/recv pairs, through every phase. */
static void batch(uint64_t first) {
  seq0 = first;
  steps = (mask & NW_EV_PROXY_STEP) != 0;
  for (int i = 0; i < B; i++) {
    gd[i] = (struct nw_descr_v5){.type = NW_EV_GROUP, .rank = 0};
    cd[i] = (struct nw_descr_v5){.type = NW_EV_COLL, .rank = 0};
    cd[i].coll.v4 = (struct nw_coll_v4){.seqNumber = seq0 + (uint64_t)i, .func = "AllReduce", .count = 256,
                                        .datatype = "ncclFloat32", .nChannels = NCH, .algo = "RING", .proto = "LL"};
  }
  timed(P_GROUP_START, B, ph_group_start);
  for (int i = 0; i < B; i++) cd[i].coll.parentGroup = g[i];
  timed(P_COLL_START, B, ph_coll_start);
  timed(P_COLL_STOP, B, ph_coll_stop);
  timed(P_GROUP_STOP, B, ph_group_stop);

  for (int i = 0; i < B; i++)
    for (int ch = 0; ch < NCH; ch++) {
      kd[i][ch] = (struct nw_descr_v5){.type = NW_EV_KERNEL_CH, .parentObj = c[i]};
      kd[i][ch].kernelCh = (struct nw_kernel_ch_v4){.channelId = (uint8_t)ch, .pTimer = 1000000 + seq0 + (uint64_t)i};
    }
  timed(P_KCH_START, B * NCH, ph_kch_start);
  for (int i = 0; i < B; i++)
    for (int s = 0; s < 2; s++) {
      pd[i][s] = (struct nw_descr_v5){.type = NW_EV_PROXY_OP, .parentObj = c[i]};
      pd[i][s].proxyOp = (struct nw_proxy_op){.pid = getpid(), .channelId = (uint8_t)s, .peer = 1 + s,
                                              .nSteps = steps ? NSTEPS : 0, .chunkSize = 131072, .isSend = s == 0};
    }
  timed(P_PX_START, B * 2, ph_px_start);
  timed(P_PX_STATE, B * 2, ph_px_state);
  if (steps) {
    for (int i = 0; i < B; i++)
      for (int s = 0; s < 2; s++)
        for (int n = 0; n < NSTEPS; n++) {
          sd[i][s][n] = (struct nw_descr_v5){.type = NW_EV_PROXY_STEP, .parentObj = px[i][s]};
          sd[i][s][n].proxyStep.step = n;
        }
    timed(P_STEP_START, B * 2 * NSTEPS, ph_step_start);
    timed(P_STEP_STATE, B * 2 * NSTEPS * 3, ph_step_state);
    timed(P_STEP_STOP, B * 2 * NSTEPS, ph_step_stop);
  }
  timed(P_PX_STOP, B * 2, ph_px_stop);
  timed(P_KCH_STATE, B * NCH, ph_kch_state);
  timed(P_KCH_STOP, B * NCH, ph_kch_stop);

  /* A send/recv pair (a ring step of a pipeline): Group, P2p Send and Recv, stops; their
   * kernel channel runs at once. */
  for (int i = 0; i < B; i++) {
    g2d[i] = (struct nw_descr_v5){.type = NW_EV_GROUP};
    start(&g2[i], &g2d[i]);
    for (int s = 0; s < 2; s++) {
      p2d[i][s] = (struct nw_descr_v5){.type = NW_EV_P2P};
      p2d[i][s].p2p.v4 = (struct nw_p2p_v4){.func = s ? "Recv" : "Send", .datatype = "ncclInt8", .count = 1024,
                                            .peer = 1 + s, .nChannels = 1};
      p2d[i][s].p2p.parentGroup = g2[i];
    }
  }
  timed(P_P2P_START, B * 2, ph_p2p_start);
  timed(P_P2P_STOP, B * 2, ph_p2p_stop);
  for (int i = 0; i < B; i++) {
    t->stopEvent(g2[i]);
    for (int s = 0; s < 2; s++) {
      struct nw_descr_v5 d = {.type = NW_EV_KERNEL_CH, .parentObj = pp[i][s]};
      void *h;
      start(&h, &d);
      t->recordEventState(h, NW_ST_KERNEL_CH_STOP, &args);
      t->stopEvent(h);
    }
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "none";
  int batches = argc > 2 ? atoi(argv[2]) : 2000;
  int rounds = argc > 3 ? atoi(argv[3]) : 7;
  if (batches < 1 || rounds < 1 || rounds > 64) {
    fprintf(stderr, "usage: microbench [PLUGIN.so|none] [BATCHES] [ROUNDS<=64]\n");
    return 2;
  }
  if (!strcmp(path, "none")) {
    t = &none_table;
  } else {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      fprintf(stderr, "microbench: dlopen %s: %s\n", path, dlerror());
      return 2;
    }
    t = dlsym(lib, "ncclProfiler_v5");
    if (!t) {
      fprintf(stderr, "microbench: %s exports no ncclProfiler_v5\n", path);
      return 2;
    }
  }
  if (t->init(&ctx, 0xBE7C4ULL, &mask, "bench", 1, 4, 0, NULL) || !mask) {
    fprintf(stderr, "microbench: init failed or asked for no events (mask 0x%x)\n", mask);
    return 2;
  }
  static double per[NPHASES][64];
  uint64_t seq = 0;
  batch(seq); /* warm the caches and the plugin's tables */
  seq += B;
  for (int r = 0; r < rounds; r++) {
    memset(ns, 0, sizeof ns);
    memset(calls, 0, sizeof calls);
    for (int b = 0; b < batches; b++, seq += B) batch(seq);
    for (int p = 0; p < NPHASES; p++) per[p][r] = calls[p] ? (double)ns[p] / (double)calls[p] : 0;
  }
  printf("microbench %s (%s), mask 0x%x: %d rounds of %d batches of %d collectives + %d send/recv pairs\n", path,
         t->name, mask, rounds, batches, B, B);
  printf("%-16s %10s %10s\n", "event", "best ns", "median ns");
  double best[NPHASES], med[NPHASES];
  for (int p = 0; p < NPHASES; p++) {
    qsort(per[p], (size_t)rounds, sizeof per[p][0], cmp_double);
    best[p] = per[p][0];
    med[p] = per[p][rounds / 2];
    if (calls[p]) printf("%-16s %10.1f %10.1f\n", phase_name[p], best[p], med[p]);
  }
  /* Per collective: the enqueue path, and every call NCCL makes for it. */
  double enq_b = best[P_GROUP_START] + best[P_COLL_START] + best[P_COLL_STOP] + best[P_GROUP_STOP];
  double enq_m = med[P_GROUP_START] + med[P_COLL_START] + med[P_COLL_STOP] + med[P_GROUP_STOP];
  const int steps = (mask & NW_EV_PROXY_STEP) != 0;
  double all_b = enq_b + NCH * (best[P_KCH_START] + best[P_KCH_STATE] + best[P_KCH_STOP]) +
                 2 * (best[P_PX_START] + best[P_PX_STATE] + best[P_PX_STOP]) +
                 (steps ? 2 * NSTEPS * (best[P_STEP_START] + 3 * best[P_STEP_STATE] + best[P_STEP_STOP]) : 0);
  double all_m = enq_m + NCH * (med[P_KCH_START] + med[P_KCH_STATE] + med[P_KCH_STOP]) +
                 2 * (med[P_PX_START] + med[P_PX_STATE] + med[P_PX_STOP]) +
                 (steps ? 2 * NSTEPS * (med[P_STEP_START] + 3 * med[P_STEP_STATE] + med[P_STEP_STOP]) : 0);
  printf("%-16s %10.1f %10.1f   (Group+Coll start and stop: the caller's thread)\n", "enqueue/coll", enq_b, enq_m);
  printf("%-16s %10.1f %10.1f   (%d channels, 2 proxy ops%s)\n", "all/coll", all_b, all_m, NCH,
         steps ? " of 4 steps" : ", no steps");
  printf("MICROBENCH {\"plugin\": \"%s\", \"mask\": %d, \"enqueue_ns\": %.1f, \"enqueue_ns_median\": %.1f, "
         "\"all_ns\": %.1f, \"all_ns_median\": %.1f}\n",
         t->name, mask, enq_b, enq_m, all_b, all_m);
  /* For `make bench-plugin-instr`: every call of each phase's function, warm-up included. */
  printf("CALLS");
  for (int p = 0; p < NPHASES; p++)
    if (all_calls[p]) printf(" %s=%llu", phase_fn[p], (unsigned long long)all_calls[p]);
  printf("\n");
  t->finalize(ctx);
  return 0;
}
