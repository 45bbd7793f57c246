/*
 * NCCL watchdog profiler plugin: NCCL (2.26+) loads it into every rank process and calls it
 * on each collective, point-to-point operation, kernel channel and network proxy op/step.
 * It keeps, per communicator, what was issued, what started on the GPU, what completed and
 * how far each peer's network transfers got, in a fixed-size shared-memory region
 * (region.h) that the node's sidecar maps read-only. See README.md in this folder.
 *
 * Rules this file lives by, because it runs inside the training process on NCCL's threads:
 *  - No allocation, no I/O and no blocking system call on an event path. The region is
 *    created, its pages touched and every table sized at the first init; events only update
 *    static memory under a per-communicator spin lock held for a few dozen instructions.
 *  - Handles given to NCCL are encoded integers (kind, comm slot, index, generation), never
 *    pointers. NCCL hands them back after the event stopped (a Coll stops right after enqueue
 *    while its kernel channels and proxy ops run on), after finalize, or from another
 *    process; decoding checks the generation, so a stale handle is ignored, never followed.
 *  - Anything unexpected is counted or ignored; only a failure to set up the region turns the
 *    plugin off. Every entry point returns success.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#if defined(__x86_64__) && defined(__GLIBC__)
/* glibc 2.34 moved dlopen into libc under a new symbol version; binding the original one
 * keeps the library loadable by training images with an older glibc. */
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
#endif

#define NW_API __attribute__((visibility("default")))
#define NW_PLUGIN_NAME "ncclwatch"
#define NW_PLUGIN_VERSION "ncclwatch-profiler 4"

/* Per communicator: operations tracked until complete (a ring in issue order) and proxy ops
 * in flight. Past the ring a new op shares the newest entry (merged_ops); past the pool a
 * proxy op is counted as dropped. Nothing is ever overwritten. The pool holds four proxy ops
 * (two channels, send and receive) per ring entry: a queue of small ops issued far ahead of
 * the GPU, each posting its proxy ops at launch, stays inside it. */
#define NW_RING 256
#define NW_PXPOOL 1024
#define NW_STEP_SLOTS 8 /* NCCL_STEPS: network steps of one proxy op in flight at once */
_Static_assert((NW_RING & (NW_RING - 1)) == 0, "ring size is a power of two");
_Static_assert(NW_RING <= 4096 && NW_PXPOOL <= 4096, "indexes fit the handle's 12 bits");
_Static_assert(NW_MAX_COMMS <= 255, "comm slot fits the handle's 8 bits");

/* ---- handles: step(3) | tag(4) | comm slot(8) | index(12) | generation(32) ------------- */

enum { H_CTX = 1, H_GROUP = 2, H_TASK = 3, H_KCH = 4, H_PXOP = 5, H_STEP = 6, H_DROPPED_CTX = 7 };

static inline void *h_make(unsigned tag, unsigned slot, unsigned idx, uint32_t gen) {
  return (void *)(uintptr_t)((uint64_t)tag | ((uint64_t)slot << 4) | ((uint64_t)idx << 12) | ((uint64_t)gen << 24));
}
static inline unsigned h_tag(const void *h) { return (unsigned)((uintptr_t)h & 0xF); }
static inline unsigned h_slot(const void *h) { return (unsigned)(((uintptr_t)h >> 4) & 0xFF); }
static inline unsigned h_idx(const void *h) { return (unsigned)(((uintptr_t)h >> 12) & 0xFFF); }
static inline uint32_t h_gen(const void *h) { return (uint32_t)((uint64_t)(uintptr_t)h >> 24); }
static inline void *h_retag(const void *h, unsigned tag) {
  return (void *)(((uintptr_t)h & ~(uintptr_t)0xF) | tag);
}
/* A ProxyStep handle is its proxy op's plus the step's slot in the op's window of steps
 * (bits 56-58, above the generation), so that overlapping steps keep their own times. */
static inline void *h_with_step(const void *h, int step) {
  return (void *)((uintptr_t)h | ((uintptr_t)((unsigned)step % NW_STEP_SLOTS) << 56));
}
static inline unsigned h_step(const void *h) { return (unsigned)(((uint64_t)(uintptr_t)h >> 56) % NW_STEP_SLOTS); }

/* ---- private state (static: nothing is allocated) ------------------------------------- */

struct nw_task {
  uint32_t gen; /* bumped when the task leaves the ring */
  uint8_t kind; /* nw_op_kind; NONE when free */
  uint8_t dir;  /* p2p: nw_dir */
  uint16_t open_stops; /* Coll/P2p events not yet stopped: 1, plus one per merged op */
  uint16_t nch;        /* kernel channels NCCL announced, merged ops' included; 0 unknown */
  uint16_t kch_started;
  uint16_t kch_done;
  uint16_t proxy_open;
  int16_t peer_idx; /* p2p: row in the region's peer table, -1 none */
  uint16_t merged;  /* ops issued past the ring that complete with this one */
  uint32_t plan;    /* Group event (kernel plan) of its newest op; 0 unknown */
  uint64_t seq_hi;  /* coll: the seq of its newest merged op (op.seq when none) */
  /* The GPU's globaltimer (ns) at the earliest kernel channel start and the latest channel
   * stop NCCL reported (ABI v4+); 0 unknown. Their difference is the op's execution time. */
  uint64_t gpu_t0, gpu_t1;
  struct nw_op op;
};

struct nw_pxop {
  uint32_t gen;
  uint8_t live;
  uint8_t dir;
  int16_t peer_idx;
  uint16_t task_idx;
  uint16_t next_free; /* index + 1; 0 ends the list */
  uint32_t task_gen;
  uint8_t has_task;
  int32_t nsteps;
  int32_t steps_done;
  uint32_t send_wait_us[NW_STEP_SLOTS]; /* low bits of when each step in flight reached SendWait, |1; 0 none */
};

struct nw_comm {
  int lock;     /* spin lock: every writer of this comm's slot holds it */
  uint32_t gen; /* context generation (atomic); bumped at init and finalize */
  int live;     /* atomic */
  int identity_pending; /* v3: comm hash and rank arrive with the first Coll/P2p */
  int last_tracked;     /* the region's `last` op is ring[head-1] (not a dropped one) */
  struct nw_comm_slot *shm;
  uint64_t head, tail; /* ring positions: issued, oldest not complete */
  uint64_t coll_seq;
  uint32_t plan_seq; /* atomic */
  uint32_t max_kch_plan;
  uint16_t px_free;
  struct nw_task ring[NW_RING];
  struct nw_pxop px[NW_PXPOOL];
};

static struct nw_comm g_comms[NW_MAX_COMMS];
static uint32_t g_issue_seq; /* atomic: the process's issue order across comms (op.proc_seq) */
static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
static struct nw_region *g_reg;
static int g_reg_tried;
static int g_disabled; /* atomic; set after g_disable_msg is written */
static int g_disable_claimed; /* atomic: the first disable() writes the reason */
static pid_t g_pid;
static nw_logger_t g_log;
static int g_mask;
static char g_path[512];
/* The region's file stays open with an exclusive flock for the life of the process: the
 * kernel drops the lock however the process ends (a SIGKILL, an OOM kill), so a reader that
 * finds it free knows the region is stale, in any pid namespace. -1: no lock. */
static int g_lock_fd = -1;
static char g_disable_msg[160];
static int g_disable_logged, g_region_logged;

/* ---- small helpers -------------------------------------------------------------------- */

static inline uint64_t now_us(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}


/* Seqlock around every change of a slot: odd while inside. The release fence orders the odd
 * value before the data stores, as the reader (heartbeat/profile) loads seq, the data, then
 * seq again with acquire loads. ThreadSanitizer rejects fences; it only checks this process,
 * where the comm lock already orders the writers, so its build keeps a compiler barrier. */
#if defined(__SANITIZE_THREAD__)
#define NW_STORE_FENCE() __atomic_signal_fence(__ATOMIC_SEQ_CST)
#else
#define NW_STORE_FENCE() __atomic_thread_fence(__ATOMIC_RELEASE)
#endif
static inline void wr_begin(struct nw_comm_slot *s) {
  __atomic_store_n(&s->h.seq, s->h.seq + 1, __ATOMIC_RELAXED);
  NW_STORE_FENCE();
}
static inline void wr_end(struct nw_comm_slot *s) { __atomic_store_n(&s->h.seq, s->h.seq + 1, __ATOMIC_RELEASE); }

static inline void count_drop(struct nw_comm *c) {
  if (c) c->shm->h.dropped_events++;
  if (g_reg) __atomic_fetch_add(&g_reg->hdr.dropped_events, 1, __ATOMIC_RELAXED);
}

static void put_str(char *dst, size_t n, const char *src) {
  size_t i = 0;
  if (src)
    for (; i + 1 < n && src[i]; i++) dst[i] = src[i];
  for (; i < n; i++) dst[i] = 0;
}

/* An op string into a field of NW_STR bytes already zeroed: on the enqueue path, where a byte
 * loop and a second zeroing cost half of a collective's issue. */
static inline void put_zstr(char *dst, const char *src) {
  if (src) memcpy(dst, src, strnlen(src, NW_STR - 1));
}

static inline int plan_before(uint32_t a, uint32_t b) { return (int32_t)(a - b) < 0; }

static int is_disabled(void) { return __atomic_load_n(&g_disabled, __ATOMIC_RELAXED); }

/* Says once, through NCCL's logger, why recording stopped. Only called from init and
 * finalize, which are off the event paths. */
static void log_pending(void) {
  if (!g_log) return;
  if (__atomic_load_n(&g_disabled, __ATOMIC_ACQUIRE) && !g_disable_logged) {
    g_disable_logged = 1;
    g_log(NW_LOG_WARN, NW_LOG_SUBSYS_INIT, __FILE__, __LINE__, "NCCL watchdog profiler disabled: %s", g_disable_msg);
  }
  if (g_reg && !g_region_logged) {
    g_region_logged = 1;
    g_log(NW_LOG_INFO, NW_LOG_SUBSYS_INIT, __FILE__, __LINE__,
          "NCCL watchdog profiler: recording to %s (profiler ABI v%u, event mask 0x%x)", g_path,
          g_reg->hdr.profiler_abi, g_mask);
  }
}

/* Turns recording off for the rest of the process: events return at once from then on. Safe
 * on an event path (no I/O): the reason goes to the region now and to NCCL's log at the next
 * init or finalize. */
static void disable(const char *why) {
  if (__atomic_exchange_n(&g_disable_claimed, 1, __ATOMIC_RELAXED)) return;
  snprintf(g_disable_msg, sizeof g_disable_msg, "%s", why);
  if (g_reg) {
    put_str(g_reg->hdr.disabled_reason, sizeof g_reg->hdr.disabled_reason, why);
    __atomic_store_n(&g_reg->hdr.disabled, 1, __ATOMIC_RELEASE);
  }
  __atomic_store_n(&g_disabled, 1, __ATOMIC_RELEASE);
}

/* ---- region set-up (first init only) -------------------------------------------------- */

static int env_int(const char *name) {
  const char *v = getenv(name);
  if (!v || !*v) return -1;
  char *end;
  long x = strtol(v, &end, 10);
  return (*end || x < 0 || x > 1 << 30) ? -1 : (int)x;
}

static int env_off(const char *name) {
  const char *v = getenv(name);
  return v && (!strcmp(v, "0") || !strcasecmp(v, "off") || !strcasecmp(v, "false") || !strcasecmp(v, "no"));
}

/* The directory both the plugin and the sidecar see: NCCLWATCH_PROFILER_DIR, else where
 * NCCL_DEBUG_FILE writes (the sidecar already watches it), else /dev/shm. */
static void region_dir(char *dir, size_t n) {
  const char *d = getenv("NCCLWATCH_PROFILER_DIR");
  if (d && *d) {
    snprintf(dir, n, "%s", d);
    return;
  }
  const char *f = getenv("NCCL_DEBUG_FILE");
  const char *slash = f ? strrchr(f, '/') : NULL;
  if (slash && slash != f && (size_t)(slash - f) < n && !memchr(f, '%', (size_t)(slash - f))) {
    memcpy(dir, f, (size_t)(slash - f));
    dir[slash - f] = 0;
    return;
  }
  snprintf(dir, n, "/dev/shm");
}

/* The host name as NCCL prints it (up to the first dot), safe inside a file name. */
static void short_host(char *host, size_t n, char *full, size_t fn) {
  if (gethostname(full, fn) != 0) snprintf(full, fn, "unknown");
  full[fn - 1] = 0;
  size_t i = 0;
  for (; i + 1 < n && full[i] && full[i] != '.'; i++) {
    char ch = full[i];
    int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_';
    host[i] = ok ? ch : '-';
  }
  host[i] = 0;
  if (!i) snprintf(host, n, "unknown");
}

static uint64_t proc_start_ticks(void) {
  char buf[1024];
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* the command name may hold spaces */
  if (!p) return 0;
  for (int field = 2; field < 22 && *p; p++)
    if (*p == ' ') field++;
  return strtoull(p, NULL, 10);
}

/* NCCL's version is not part of the profiler API; ask the libnccl already loaded in this
 * process (RTLD_NOLOAD never loads anything). ncclGetVersion only stores a constant. */
static uint32_t probe_nccl_version(void) {
  typedef int (*get_version_fn)(int *);
  get_version_fn fn = NULL;
  void *lib = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD);
  void *sym = lib ? dlsym(lib, "ncclGetVersion") : NULL;
  if (!sym) sym = dlsym(RTLD_DEFAULT, "ncclGetVersion");
  memcpy(&fn, &sym, sizeof fn);
  int v = 0;
  if (!fn || fn(&v) != NW_SUCCESS || v <= 0) v = 0;
  if (lib) dlclose(lib);
  return (uint32_t)v;
}

static void fill_env(struct nw_hdr *h) {
  h->rank = env_int("RANK");
  h->local_rank = env_int("LOCAL_RANK");
  h->world_size = env_int("WORLD_SIZE");
  h->local_world_size = env_int("LOCAL_WORLD_SIZE");
  const char *job = getenv("TORCHELASTIC_RUN_ID");
  if (!job || !*job) job = getenv("SLURM_JOB_ID");
  put_str(h->job_id, sizeof h->job_id, job);
}

/* Creates the region under a temporary name and renames it into place, so a reader never
 * sees a half-written header. fallocate reserves the pages now: a full tmpfs later would
 * otherwise turn a store on NCCL's thread into SIGBUS. */
static void region_create(void) {
  g_reg_tried = 1;
  g_pid = getpid();
  if (env_off("NCCLWATCH_PROFILER")) {
    disable("NCCLWATCH_PROFILER=0");
    return;
  }
  char dir[256], host[64], full[256], tmp[512];
  region_dir(dir, sizeof dir);
  short_host(host, sizeof host, full, sizeof full);
  snprintf(g_path, sizeof g_path, "%s/ncclwatch-prof.%s.%d.bin", dir, host, (int)g_pid);
  snprintf(tmp, sizeof tmp, "%s/.ncclwatch-prof.%s.%d.tmp", dir, host, (int)g_pid);

  size_t size = sizeof(struct nw_region);
  int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    char why[160];
    snprintf(why, sizeof why, "cannot create %.100s: %s", tmp, strerror(errno));
    disable(why);
    return;
  }
  int rc = posix_fallocate(fd, 0, (off_t)size);
  void *map = rc == 0 ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (rc == 0 && map == MAP_FAILED) rc = errno;
  /* Nobody else sees the file before the rename, so this never waits. */
  int locked = rc == 0 && flock(fd, LOCK_EX | LOCK_NB) == 0;
  if (locked) {
    g_lock_fd = fd;
  } else {
    close(fd);
  }
  if (rc != 0) {
    char why[160];
    snprintf(why, sizeof why, "cannot size or map %.100s: %s", tmp, strerror(rc));
    unlink(tmp);
    disable(why);
    return;
  }
  memset(map, 0, size); /* fault every page in now, not on NCCL's threads */
  struct nw_region *r = map;
  struct nw_hdr *h = &r->hdr;
  h->magic = NW_MAGIC;
  h->layout_version = NW_LAYOUT_VERSION;
  h->header_size = NW_HEADER_SIZE;
  h->region_size = size;
  h->max_comms = NW_MAX_COMMS;
  h->comm_size = sizeof(struct nw_comm_slot);
  h->max_peers = NW_MAX_PEERS;
  h->peer_size = sizeof(struct nw_peer);
  h->op_size = sizeof(struct nw_op);
  h->pid = (int32_t)g_pid;
  h->proc_start_ticks = proc_start_ticks();
  h->start_us = now_us(CLOCK_REALTIME);
  h->start_mono_us = now_us(CLOCK_MONOTONIC);
  h->state = NW_PROC_RUNNING;
  h->event_mask = (uint64_t)g_mask;
  put_str(h->host, sizeof h->host, full);
  put_str(h->plugin_version, sizeof h->plugin_version, NW_PLUGIN_VERSION);
  fill_env(h);
  if (rename(tmp, g_path) != 0) {
    char why[160];
    snprintf(why, sizeof why, "cannot rename region to %.100s: %s", g_path, strerror(errno));
    munmap(map, size);
    unlink(tmp);
    if (g_lock_fd >= 0) close(g_lock_fd);
    g_lock_fd = -1;
    disable(why);
    return;
  }
  g_reg = r;
}

/* A process forked after NCCL started inherits the parent's mapping: it must not write into
 * the parent's region, so it starts over with its own. */
static void forget_parent_region(void) {
  if (g_reg) munmap(g_reg, sizeof(struct nw_region));
  /* The lock belongs to the parent's open file: closing our copy of it keeps it held for the
   * parent (flock drops it only with its last descriptor, or an explicit unlock). */
  if (g_lock_fd >= 0) close(g_lock_fd);
  g_lock_fd = -1;
  g_reg = NULL;
  g_reg_tried = 0;
  g_region_logged = 0;
  memset(g_comms, 0, sizeof g_comms);
}

__attribute__((destructor)) static void on_exit_mark(void) {
  if (!g_reg || getpid() != g_pid) return;
  __atomic_store_n(&g_reg->hdr.exit_us, now_us(CLOCK_REALTIME), __ATOMIC_RELAXED);
  __atomic_store_n(&g_reg->hdr.state, NW_PROC_EXITED, __ATOMIC_RELEASE);
}

/* ---- comm slots ----------------------------------------------------------------------- */

static struct nw_comm *comm_of(void *ctx) {
  if (h_tag(ctx) != H_CTX) return NULL;
  unsigned slot = h_slot(ctx);
  if (slot >= NW_MAX_COMMS) return NULL;
  struct nw_comm *c = &g_comms[slot];
  if (!__atomic_load_n(&c->live, __ATOMIC_ACQUIRE) || __atomic_load_n(&c->gen, __ATOMIC_RELAXED) != h_gen(ctx))
    return NULL;
  return c;
}

/* Under the comm lock: is the context still the one the lock guards (not finalized meanwhile)? */
static inline int comm_still(struct nw_comm *c, void *ctx) {
  return c->live && c->gen == h_gen(ctx);
}

static void comm_reset(struct nw_comm *c, unsigned slot) {
  struct nw_comm_slot *s = &g_reg->comms[slot];
  c->shm = s;
  c->head = c->tail = 0;
  c->coll_seq = 0;
  c->last_tracked = 0;
  __atomic_store_n(&c->plan_seq, 0, __ATOMIC_RELAXED);
  c->max_kch_plan = 0;
  for (unsigned i = 0; i < NW_RING; i++) c->ring[i].kind = NW_OP_NONE;
  for (unsigned i = 0; i < NW_PXPOOL; i++) {
    c->px[i].live = 0;
    c->px[i].next_free = (uint16_t)(i + 2 <= NW_PXPOOL ? i + 2 : 0);
  }
  c->px_free = 1;
}

/* Invalidates every handle of a comm that goes away: their generations move on. */
static void comm_forget_handles(struct nw_comm *c) {
  for (unsigned i = 0; i < NW_RING; i++) {
    c->ring[i].gen++;
    c->ring[i].kind = NW_OP_NONE;
  }
  for (unsigned i = 0; i < NW_PXPOOL; i++) {
    c->px[i].gen++;
    c->px[i].live = 0;
  }
}

static nw_result_t common_init(unsigned abi, void **ctx, int *mask, uint64_t comm_id, int nnodes, int nranks,
                               int rank, nw_logger_t logfn) {
  if (ctx) *ctx = NULL;
  pthread_mutex_lock(&g_init_mu);
  if (logfn) g_log = logfn;
  if (g_reg_tried && getpid() != g_pid) forget_parent_region();
  if (!g_reg_tried) {
    g_mask = NW_EV_GROUP | NW_EV_COLL | NW_EV_P2P | NW_EV_PROXY_OP | NW_EV_KERNEL_CH;
    if (!env_off("NCCLWATCH_PROFILER_STEPS")) g_mask |= NW_EV_PROXY_STEP;
    region_create();
    if (g_reg) __atomic_store_n(&g_reg->hdr.nccl_version, probe_nccl_version(), __ATOMIC_RELAXED);
  }
  if (g_reg) __atomic_store_n(&g_reg->hdr.profiler_abi, abi, __ATOMIC_RELAXED);
  if (!ctx || !mask || is_disabled() || !g_reg) {
    if (mask) *mask = 0;
    log_pending();
    pthread_mutex_unlock(&g_init_mu);
    return NW_SUCCESS;
  }
  __atomic_fetch_add(&g_reg->hdr.comms_inited, 1, __ATOMIC_RELAXED);
  *mask = g_mask;
  unsigned slot = 0;
  while (slot < NW_MAX_COMMS && g_comms[slot].live) slot++;
  if (slot == NW_MAX_COMMS) {
    /* Never overwrite a live slot: this comm is counted and its events dropped. */
    __atomic_fetch_add(&g_reg->hdr.dropped_comms, 1, __ATOMIC_RELAXED);
    *ctx = h_make(H_DROPPED_CTX, 0, 0, 0);
    log_pending();
    pthread_mutex_unlock(&g_init_mu);
    return NW_SUCCESS;
  }
  struct nw_comm *c = &g_comms[slot];
  spin_lock(&c->lock);
  comm_reset(c, slot);
  struct nw_comm_slot *s = c->shm;
  uint32_t slot_gen = s->h.gen + 1;
  wr_begin(s);
  memset((char *)s + sizeof s->h.seq, 0, sizeof *s - sizeof s->h.seq);
  s->h.state = NW_SLOT_LIVE;
  s->h.gen = slot_gen;
  s->h.comm_id = comm_id;
  s->h.rank = rank;
  s->h.nranks = nranks;
  s->h.nnodes = nnodes;
  s->h.init_us = now_us(CLOCK_REALTIME);
  wr_end(s);
  c->identity_pending = abi < 4;
  __atomic_store_n(&c->gen, c->gen + 1, __ATOMIC_RELAXED);
  __atomic_store_n(&c->live, 1, __ATOMIC_RELEASE);
  *ctx = h_make(H_CTX, slot, 0, c->gen);
  spin_unlock(&c->lock);
  log_pending();
  pthread_mutex_unlock(&g_init_mu);
  return NW_SUCCESS;
}

static nw_result_t nw_finalize(void *ctx) {
  pthread_mutex_lock(&g_init_mu);
  struct nw_comm *c = comm_of(ctx);
  if (c) {
    spin_lock(&c->lock);
    if (comm_still(c, ctx)) {
      struct nw_comm_slot *s = c->shm;
      wr_begin(s);
      s->h.state = NW_SLOT_FREE;
      wr_end(s);
      comm_forget_handles(c);
      __atomic_store_n(&c->gen, c->gen + 1, __ATOMIC_RELAXED);
      __atomic_store_n(&c->live, 0, __ATOMIC_RELEASE);
      __atomic_fetch_add(&g_reg->hdr.comms_finalized, 1, __ATOMIC_RELAXED);
    }
    spin_unlock(&c->lock);
  }
  log_pending();
  pthread_mutex_unlock(&g_init_mu);
  return NW_SUCCESS;
}

/* ---- op tracking (all under the comm lock, inside wr_begin/wr_end) -------------------- */

static int peer_row(struct nw_comm *c, int peer) {
  struct nw_comm_slot *s = c->shm;
  uint32_t n = s->h.npeers;
  for (uint32_t i = 0; i < n; i++)
    if (s->peers[i].peer == peer) return (int)i;
  if (n >= NW_MAX_PEERS) {
    s->h.dropped_peers++;
    __atomic_fetch_add(&g_reg->hdr.dropped_peers, 1, __ATOMIC_RELAXED);
    return -1;
  }
  s->peers[n].peer = peer;
  s->h.npeers = n + 1;
  return (int)n;
}

static inline struct nw_peer_dir *peer_dir(struct nw_comm *c, int row, unsigned dir) {
  return row < 0 ? NULL : &c->shm->peers[row].dir[dir & 1];
}

static struct nw_task *task_of(struct nw_comm *c, const void *h) {
  unsigned tag = h_tag(h);
  if ((tag != H_TASK && tag != H_KCH) || h_slot(h) >= NW_MAX_COMMS || &g_comms[h_slot(h)] != c ||
      h_idx(h) >= NW_RING)
    return NULL;
  struct nw_task *t = &c->ring[h_idx(h)];
  return (t->kind != NW_OP_NONE && t->gen == h_gen(h)) ? t : NULL;
}

static struct nw_pxop *pxop_of(struct nw_comm *c, const void *h) {
  unsigned tag = h_tag(h);
  if ((tag != H_PXOP && tag != H_STEP) || h_slot(h) >= NW_MAX_COMMS || &g_comms[h_slot(h)] != c ||
      h_idx(h) >= NW_PXPOOL)
    return NULL;
  struct nw_pxop *p = &c->px[h_idx(h)];
  return (p->live && p->gen == h_gen(h)) ? p : NULL;
}

/* Kernel channels: NCCL announces nChannels for a collective and starts one KernelCh child
 * per channel. A p2p's announced count is not reliable across versions (NCCL's v4 adapter
 * leaves it unset), so a p2p is judged by its started channels all having stopped. Either
 * way a kernel of a later plan on the same comm proves this one's kernels finished, since
 * NCCL runs a comm's kernels in launch order. */
static int task_complete(const struct nw_comm *c, const struct nw_task *t) {
  if (t->open_stops || t->proxy_open) return 0;
  if (t->plan && c->max_kch_plan && plan_before(t->plan, c->max_kch_plan)) return 1;
  if (t->kind == NW_OP_COLL && t->nch) return t->kch_done >= t->nch;
  return t->kch_started && t->kch_done >= t->kch_started;
}

static void op_counts(struct nw_op *o, const struct nw_task *t) {
  *o = t->op;
  o->kch_started = t->kch_started > 255 ? 255 : (uint8_t)t->kch_started;
  o->kch_done = t->kch_done > 255 ? 255 : (uint8_t)t->kch_done;
  o->proxy_open = t->proxy_open;
}

/* What changes of an op once it is shown (all set with op_counts when it became the op in
 * flight or the newest): its channel and proxy counts and its kernel's start. */
static inline void op_counters(struct nw_op *o, const struct nw_task *t) {
  o->kch_started = t->kch_started > 255 ? 255 : (uint8_t)t->kch_started;
  o->kch_done = t->kch_done > 255 ? 255 : (uint8_t)t->kch_done;
  o->proxy_open = t->proxy_open;
  o->gpu_start_us = t->op.gpu_start_us;
  o->gpu_timer = t->op.gpu_timer;
}

static void publish_inflight(struct nw_comm *c) {
  struct nw_comm_slot *s = c->shm;
  if (c->tail == c->head)
    memset(&s->h.inflight, 0, sizeof s->h.inflight);
  else
    op_counts(&s->h.inflight, &c->ring[c->tail % NW_RING]);
  s->h.pending = (uint32_t)(c->head - c->tail);
}

/* Mirrors a task's changed counters into the region when it is the op shown there. */
static void touched(struct nw_comm *c, const struct nw_task *t) {
  if (c->tail != c->head && t == &c->ring[c->tail % NW_RING]) op_counters(&c->shm->h.inflight, t);
  if (c->last_tracked && c->tail != c->head && t == &c->ring[(c->head - 1) % NW_RING])
    op_counters(&c->shm->h.last, t);
}

/* NCCL's datatype names end in their width in bits, the first digits after "nccl" (Int8,
 * Float16, Bfloat16, Float32, Uint64, Float8e4m3): the size in bytes; 0 unknown. */
static uint64_t dtype_bytes(const char *s) {
  unsigned bits = 0;
  for (unsigned i = 0; i < NW_STR && s[i]; i++) {
    if (s[i] >= '0' && s[i] <= '9') {
      bits = bits * 10 + (unsigned)(s[i] - '0');
    } else if (bits) {
      break;
    }
  }
  return (bits == 8 || bits == 16 || bits == 32 || bits == 64) ? bits / 8 : 0;
}

static unsigned bw_func(const struct nw_task *t) {
  const char *f = t->op.func;
  if (t->kind == NW_OP_P2P) return t->dir == NW_RECV ? NW_BW_RECV : NW_BW_SEND;
  if (!strcmp(f, "AllReduce")) return NW_BW_ALLREDUCE;
  if (!strcmp(f, "AllGather")) return NW_BW_ALLGATHER;
  if (!strcmp(f, "ReduceScatter")) return NW_BW_REDUCESCATTER;
  if (!strcmp(f, "Broadcast")) return NW_BW_BROADCAST;
  if (!strcmp(f, "Reduce")) return NW_BW_REDUCE;
  return NW_BW_OTHER;
}

static unsigned bw_bucket(uint64_t bytes) {
  unsigned b = 0;
  for (uint64_t lim = 4096; b + 1 < NW_BW_BUCKETS && bytes >= lim; lim <<= 4) b++;
  return b;
}

/* Adds a completed op's execution time to its function's and size's cell. Only an op that
 * completed by its own kernel channels (all of them stopped) and stands for itself alone (not
 * merged past the ring) is timed: by the GPU's clock where NCCL gave both ends, else by the
 * host's from its first channel seen running. Runs at retirement, off the enqueue path. */
static void record_timing(struct nw_comm *c, const struct nw_task *t, uint64_t now) {
  if (t->merged || !t->kch_started || t->kch_done < t->kch_started) return;
  uint64_t ns, gpu = 0;
  if (t->gpu_t0 && t->gpu_t1 > t->gpu_t0 && t->gpu_t1 - t->gpu_t0 < 3600ULL * 1000000000ULL) {
    ns = t->gpu_t1 - t->gpu_t0;
    gpu = 1;
  } else if (t->op.gpu_start_us && now >= t->op.gpu_start_us) {
    ns = (now - t->op.gpu_start_us) * 1000u;
  } else {
    return;
  }
  uint64_t bytes = t->op.count * dtype_bytes(t->op.dtype);
  struct nw_bw_cell *cell = &c->shm->bw[bw_func(t)][bw_bucket(bytes)];
  cell->ops++;
  cell->bytes += bytes;
  cell->exec_ns += ns;
  cell->gpu_timed += gpu;
}

/* Retires complete ops from the front of the ring: coll_done is a prefix, so a finished op
 * behind an unfinished one waits. now 0: not read yet (read here when an op completes). */
static void retire(struct nw_comm *c, uint64_t now) {
  struct nw_comm_slot *s = c->shm;
  int moved = 0;
  while (c->tail != c->head) {
    struct nw_task *t = &c->ring[c->tail % NW_RING];
    if (!task_complete(c, t)) break;
    if (!now) now = now_us(CLOCK_REALTIME);
    record_timing(c, t, now);
    if (t->kind == NW_OP_COLL) {
      s->h.coll_done = t->seq_hi;
      if (t->op.gpu_start_us && t->op.gpu_start_us >= t->op.issue_us && now >= t->op.gpu_start_us) {
        s->h.timed_colls++;
        s->h.queue_us += t->op.gpu_start_us - t->op.issue_us;
        s->h.busy_us += now - t->op.gpu_start_us;
      }
      /* A merged op may finish without its own channel start having been counted. */
      if (s->h.coll_started < s->h.coll_done) s->h.coll_started = s->h.coll_done;
    } else {
      s->h.p2p_done += 1u + t->merged;
      struct nw_peer_dir *d = peer_dir(c, t->peer_idx, t->dir);
      if (d) d->p2p_done += 1u + t->merged;
    }
    if (c->last_tracked && t == &c->ring[(c->head - 1) % NW_RING]) op_counts(&s->h.last, t);
    s->h.last_done_us = now;
    t->gen++;
    t->kind = NW_OP_NONE;
    c->tail++;
    moved = 1;
  }
  if (moved) publish_inflight(c);
}

/* Past the ring, a new op joins the newest tracked entry when it is of the same kind (and,
 * for a p2p, the same peer and direction): NCCL runs a comm's kernels in launch order, so the
 * entry is complete when every op in it is, and coll_done stays exact instead of stopping
 * below coll_issued once the queue drains. Its kernel channels and proxy ops count toward the
 * entry; the plan of the newest op stands for the entry, so only a later plan's kernel
 * proves it done. An op that cannot join is dropped: counted, and its children ignored. */
static void *merge(struct nw_comm *c, unsigned slot, const struct nw_op *o, unsigned kind, unsigned dir, int row,
                   uint64_t seq, uint32_t plan) {
  struct nw_task *t = &c->ring[(c->head - 1) % NW_RING];
  if (t->kind != kind || (kind == NW_OP_P2P && (t->dir != dir || t->peer_idx != row)) || t->merged == UINT16_MAX ||
      t->open_stops == UINT16_MAX) {
    count_drop(c);
    return NULL;
  }
  t->merged++;
  t->open_stops++;
  t->nch = (t->nch && o->nchannels && t->nch <= UINT16_MAX - o->nchannels) ? (uint16_t)(t->nch + o->nchannels) : 0;
  t->plan = plan;
  t->seq_hi = seq;
  c->shm->h.merged_ops++;
  touched(c, t);
  return h_make(H_TASK, (unsigned)slot, (unsigned)(t - c->ring), t->gen);
}

/* The digest of a call history: a multiply-xorshift step per field, cheap and the same on
 * every rank. Strings enter as the NUL-padded bytes the region keeps. */
static inline uint64_t mix(uint64_t d, uint64_t v) {
  d ^= v + 0x9e3779b97f4a7c15ULL;
  d *= 0xbf58476d1ce4e5b9ULL;
  return d ^ (d >> 31);
}

static inline uint64_t word(const char *s, unsigned i) {
  uint64_t w;
  memcpy(&w, s + 8 * i, sizeof w);
  return w;
}

/* Only rooted collectives agree on a root; the others pass whatever their caller had. */
static int rooted(const char *func) {
  switch (func[0]) {
  case 'B': return !strcmp(func, "Broadcast");
  case 'R': return !strcmp(func, "Reduce");
  case 'G': return !strcmp(func, "Gather");
  case 'S': return !strcmp(func, "Scatter");
  }
  return 0;
}

/* Records a collective's signature, folds it into the comm's digest and marks the aligned
 * positions: what lets the detector see that ranks called different things at one position. */
static void record_sig(struct nw_comm_slot *s, const struct nw_op *o) {
  _Static_assert(NW_STR == 16, "signature strings are two words");
  struct nw_history *h = &s->hist;
  struct nw_sig *g = &h->sigs[(o->seq - 1) & (NW_SIGS - 1)];
  g->seq = o->seq;
  g->count = o->count;
  g->issue_us = o->issue_us;
  g->root = o->root;
  g->proc_seq = o->proc_seq;
  memcpy(g->func, o->func, NW_STR);
  memcpy(g->dtype, o->dtype, NW_STR);
  uint64_t d = h->digest;
  d = mix(d, word(o->func, 0));
  d = mix(d, word(o->func, 1));
  d = mix(d, word(o->dtype, 0));
  d = mix(d, word(o->dtype, 1));
  d = mix(d, rooted(o->func) ? (uint64_t)(uint32_t)o->root : 0);
  d = mix(d, o->count);
  h->digest = d;
  uint64_t every = 16;
  for (unsigned level = 0; level < NW_MARK_LEVELS && o->seq % every == 0; level++, every <<= 4) {
    struct nw_mark *m = &h->marks[level][(o->seq / every) % NW_MARKS_PER_LEVEL];
    m->seq = o->seq;
    m->digest = d;
    m->t_us = o->issue_us;
  }
}

static void *issue(struct nw_comm *c, unsigned slot, const struct nw_ev *e, unsigned kind, uint64_t now) {
  struct nw_comm_slot *s = c->shm;
  if (c->head - c->tail > NW_RING) {
    disable("internal error: operation ring corrupt");
    return NULL;
  }
  if (c->identity_pending && e->has_comm_hash) {
    s->h.comm_id = e->comm_hash;
    s->h.rank = e->rank;
    c->identity_pending = 0;
  }
  uint64_t seq;
  unsigned dir = 0;
  int row = -1;
  if (kind == NW_OP_COLL) {
    seq = ++c->coll_seq;
    s->h.coll_issued = seq;
    s->h.nccl_seq = e->nccl_seq;
  } else {
    /* Send and Recv, plus the one-sided calls of 2.29+: a wait or a recv is incoming. */
    dir = (e->func && (!strncmp(e->func, "Recv", 4) || !strncmp(e->func, "Wait", 4))) ? NW_RECV : NW_SEND;
    row = peer_row(c, e->root_or_peer);
    struct nw_peer_dir *d = peer_dir(c, row, dir);
    seq = d ? ++d->p2p_issued : 0;
    if (d) d->p2p_last_us = now;
    s->h.p2p_issued++;
  }
  s->h.last_event_us = now;
  struct nw_op o;
  memset(&o, 0, sizeof o);
  o.seq = seq;
  o.nccl_seq = kind == NW_OP_COLL ? e->nccl_seq : 0;
  o.count = e->count;
  o.issue_us = now;
  o.root = e->root_or_peer;
  o.kind = (uint8_t)kind;
  o.nchannels = (e->nch > 0 && e->nch <= 64) ? (uint8_t)e->nch : 0;
  put_zstr(o.func, e->func);
  put_zstr(o.dtype, e->dtype);
  put_zstr(o.algo, e->algo);
  put_zstr(o.proto, e->proto);
  o.proc_seq = __atomic_add_fetch(&g_issue_seq, 1, __ATOMIC_RELAXED);
  if (!o.proc_seq) o.proc_seq = __atomic_add_fetch(&g_issue_seq, 1, __ATOMIC_RELAXED); /* 0 means unknown */
  s->h.last = o; /* the newest issued, tracked or not */
  if (kind == NW_OP_COLL) record_sig(s, &o);
  uint32_t plan = (h_tag(e->parent) == H_GROUP && h_slot(e->parent) == slot) ? h_gen(e->parent) : 0;
  c->last_tracked = c->head - c->tail < NW_RING;
  if (!c->last_tracked) return merge(c, slot, &o, kind, dir, row, seq, plan);
  unsigned idx = (unsigned)(c->head % NW_RING);
  struct nw_task *t = &c->ring[idx];
  t->kind = (uint8_t)kind;
  t->dir = (uint8_t)dir;
  t->open_stops = 1;
  t->nch = o.nchannels;
  t->kch_started = t->kch_done = t->proxy_open = 0;
  t->peer_idx = (int16_t)row;
  t->merged = 0;
  t->plan = plan;
  t->seq_hi = seq;
  t->gpu_t0 = t->gpu_t1 = 0;
  t->op = o;
  c->head++;
  /* The op in flight changes only when the ring was empty; behind others, only the count. */
  if (c->head - c->tail == 1)
    publish_inflight(c);
  else
    s->h.pending = (uint32_t)(c->head - c->tail);
  return h_make(H_TASK, slot, idx, t->gen);
}

static void *on_proxy_op(struct nw_comm *c, unsigned slot, const struct nw_ev *e, uint64_t now) {
  if (!c->px_free) {
    count_drop(c);
    return NULL;
  }
  if (c->px_free > NW_PXPOOL) {
    disable("internal error: proxy-op free list corrupt");
    return NULL;
  }
  unsigned idx = c->px_free - 1u;
  struct nw_pxop *p = &c->px[idx];
  c->px_free = p->next_free;
  p->live = 1;
  p->dir = e->is_send ? NW_SEND : NW_RECV;
  p->nsteps = e->nsteps > 0 ? e->nsteps : 0;
  p->steps_done = 0;
  p->has_task = 0;
  memset(p->send_wait_us, 0, sizeof p->send_wait_us);
  /* parentObj is only ours when the op was posted by this process (NCCL tags it with the
   * poster's pid for proxies that serve several processes); 0 means untagged. */
  struct nw_task *t = (e->pid == 0 || e->pid == (int)g_pid) ? task_of(c, e->parent) : NULL;
  if (t) {
    t->proxy_open++;
    p->has_task = 1;
    p->task_idx = (uint16_t)(t - c->ring);
    p->task_gen = t->gen;
    touched(c, t);
  }
  p->peer_idx = (int16_t)peer_row(c, e->root_or_peer);
  struct nw_peer_dir *d = peer_dir(c, p->peer_idx, p->dir);
  if (d) {
    d->ops_started++;
    d->steps_total += (uint64_t)p->nsteps;
    d->channel = (uint16_t)e->channel;
  }
  c->shm->h.last_event_us = now;
  return h_make(H_PXOP, slot, idx, p->gen);
}

static void proxy_op_stop(struct nw_comm *c, struct nw_pxop *p, uint64_t now) {
  struct nw_peer_dir *d = peer_dir(c, p->peer_idx, p->dir);
  if (d) {
    d->ops_done++;
    if (p->steps_done < p->nsteps) d->steps_done += (uint64_t)(p->nsteps - p->steps_done);
    d->last_step_us = now;
  }
  if (p->has_task) {
    struct nw_task *t = &c->ring[p->task_idx % NW_RING];
    if (t->kind != NW_OP_NONE && t->gen == p->task_gen && t->proxy_open) {
      t->proxy_open--;
      touched(c, t);
    }
  }
  p->live = 0;
  p->gen++;
  p->next_free = c->px_free;
  c->px_free = (uint16_t)((p - c->px) + 1);
  retire(c, now);
}

static void kch_start(struct nw_comm *c, struct nw_task *t, uint64_t timer, uint64_t now) {
  struct nw_comm_slot *s = c->shm;
  if (timer && (!t->gpu_t0 || timer < t->gpu_t0)) t->gpu_t0 = timer;
  if (t->kch_started++ == 0) {
    t->op.gpu_start_us = now;
    t->op.gpu_timer = timer;
    if (t->kind == NW_OP_COLL && t->op.seq > s->h.coll_started) s->h.coll_started = t->op.seq;
  }
  touched(c, t);
  if (t->plan && (!c->max_kch_plan || plan_before(c->max_kch_plan, t->plan))) {
    c->max_kch_plan = t->plan;
    retire(c, now);
  }
}

/* ---- the three event entry points, shared by every ABI version ----------------------- */

/* A Group is one kernel plan: a number, no table entry, no lock. NCCL 2.27 starts a plan's
 * Coll/P2p events only when its Group handle is non-NULL, so this must always return one. The
 * adapters take it before building an event: it is on the enqueue path of every op. */
static void *group_start(void *ctx) {
  if (is_disabled()) return NULL;
  if (h_tag(ctx) == H_DROPPED_CTX) {
    count_drop(NULL);
    return NULL;
  }
  struct nw_comm *c = comm_of(ctx);
  if (!c) return NULL;
  uint32_t plan = __atomic_add_fetch(&c->plan_seq, 1, __ATOMIC_RELAXED);
  if (!plan) plan = __atomic_add_fetch(&c->plan_seq, 1, __ATOMIC_RELAXED);
  return h_make(H_GROUP, h_slot(ctx), 0, plan);
}

static void *start_event(void *ctx, const struct nw_ev *e) {
  if (is_disabled()) return NULL;
  if (h_tag(ctx) == H_DROPPED_CTX) {
    count_drop(NULL);
    return NULL;
  }
  struct nw_comm *c = comm_of(ctx);
  if (!c) return NULL;
  unsigned slot = h_slot(ctx);
  switch (e->type) {
  case NW_EV_GROUP:
    return group_start(ctx);
  case NW_EV_PROXY_STEP:
    /* A step is its proxy op plus a tag: no table entry, validated when it stops. */
    return (h_tag(e->parent) == H_PXOP && h_slot(e->parent) == slot) ? h_with_step(h_retag(e->parent, H_STEP), e->step)
                                                                      : NULL;
  case NW_EV_COLL:
  case NW_EV_P2P:
  case NW_EV_PROXY_OP:
  case NW_EV_KERNEL_CH:
    break;
  default:
    return NULL;
  }
  uint64_t now = now_us(CLOCK_REALTIME);
  void *h = NULL;
  spin_lock(&c->lock);
  if (comm_still(c, ctx)) {
    struct nw_comm_slot *s = c->shm;
    wr_begin(s);
    if (e->type == NW_EV_COLL) {
      h = issue(c, slot, e, NW_OP_COLL, now);
    } else if (e->type == NW_EV_P2P) {
      h = issue(c, slot, e, NW_OP_P2P, now);
    } else if (e->type == NW_EV_PROXY_OP) {
      h = on_proxy_op(c, slot, e, now);
    } else {
      struct nw_task *t = task_of(c, e->parent);
      if (t) {
        kch_start(c, t, e->timer, now);
        h = h_retag(e->parent, H_KCH);
      }
    }
    wr_end(s);
  }
  spin_unlock(&c->lock);
  return h;
}

static struct nw_comm *comm_of_handle(void *h) {
  unsigned tag = h_tag(h);
  if (tag < H_TASK || tag > H_STEP || h_slot(h) >= NW_MAX_COMMS) return NULL;
  struct nw_comm *c = &g_comms[h_slot(h)];
  return __atomic_load_n(&c->live, __ATOMIC_ACQUIRE) ? c : NULL;
}

/* A kernel channel's stop time on the GPU comes with its KernelChStop state, and NCCL stops
 * the channel right after on the same thread: the state only leaves the time here, without
 * the comm lock, and the stop takes it in under the lock it takes anyway. */
static __thread struct {
  void *h;
  uint64_t timer;
} kch_stop_pending;

static nw_result_t nw_stop(void *h) {
  if (is_disabled()) return NW_SUCCESS;
  struct nw_comm *c = comm_of_handle(h);
  if (!c) return NW_SUCCESS;
  /* A Coll's or P2p's stop comes right after its enqueue (NCCL 2.28+), on the caller's thread:
   * it completes nothing then, so it reads no clock; retire reads one if an op completes. */
  unsigned tag = h_tag(h);
  uint64_t now = tag == H_TASK ? 0 : now_us(CLOCK_REALTIME);
  spin_lock(&c->lock);
  if (c->live) {
    struct nw_comm_slot *s = c->shm;
    wr_begin(s);
    if (tag == H_TASK || tag == H_KCH) {
      struct nw_task *t = task_of(c, h);
      if (t && tag == H_TASK && t->open_stops) t->open_stops--;
      if (t && tag == H_KCH && t->kch_done < t->kch_started) {
        t->kch_done++;
        if (kch_stop_pending.h == h) {
          if (kch_stop_pending.timer > t->gpu_t1) t->gpu_t1 = kch_stop_pending.timer;
          kch_stop_pending.h = NULL;
        }
      }
      if (t) {
        touched(c, t);
        retire(c, now);
      }
    } else {
      struct nw_pxop *p = pxop_of(c, h);
      if (p && tag == H_PXOP) {
        proxy_op_stop(c, p, now);
      } else if (p) {
        struct nw_peer_dir *d = peer_dir(c, p->peer_idx, p->dir);
        if (p->steps_done < p->nsteps) {
          p->steps_done++;
          if (d) d->steps_done++;
        }
        if (d) d->last_step_us = now;
        uint32_t *sw = &p->send_wait_us[h_step(h)];
        if (*sw && d) {
          d->net_us += (uint32_t)((uint32_t)now - (*sw & ~1u));
          d->net_steps++;
        }
        *sw = 0;
      }
    }
    if (now) s->h.last_event_us = now;
    wr_end(s);
  }
  spin_unlock(&c->lock);
  return NW_SUCCESS;
}

/* States we keep: a proxy op's or step's latest state per peer and direction (e.g. 20,
 * SendPeerWait: the peer has not posted its receive). Kernel-channel stop needs nothing: its
 * stopEvent follows. */
static nw_result_t nw_state(void *h, int state, uint64_t timer) {
  if (is_disabled()) return NW_SUCCESS;
  unsigned tag = h_tag(h);
  if (tag == H_KCH) {
    if (state == NW_ST_KERNEL_CH_STOP && timer) {
      kch_stop_pending.h = h;
      kch_stop_pending.timer = timer;
    }
    return NW_SUCCESS;
  }
  if ((tag != H_PXOP && tag != H_STEP) || state < 0 || state > 255) return NW_SUCCESS;
  struct nw_comm *c = comm_of_handle(h);
  if (!c) return NW_SUCCESS;
  uint64_t now = now_us(CLOCK_REALTIME);
  spin_lock(&c->lock);
  struct nw_pxop *p = c->live ? pxop_of(c, h) : NULL;
  struct nw_peer_dir *d = p ? peer_dir(c, p->peer_idx, p->dir) : NULL;
  if (d) {
    struct nw_comm_slot *s = c->shm;
    wr_begin(s);
    d->last_state = (uint8_t)state;
    d->state_us = now;
    wr_end(s);
  }
  /* A send step handed to the network: its end will say how long the link took. Private
   * memory, so no seqlock. */
  if (p && tag == H_STEP && state == NW_ST_STEP_SEND_WAIT && p->dir == NW_SEND)
    p->send_wait_us[h_step(h)] = (uint32_t)now | 1u;
  spin_unlock(&c->lock);
  return NW_SUCCESS;
}

/* ---- ABI adapters: each version's descriptor into an nw_ev ---------------------------- */

static void ev_proxy_op(struct nw_ev *ev, const struct nw_proxy_op *op) {
  ev->pid = op->pid;
  ev->channel = op->channelId;
  ev->root_or_peer = op->peer;
  ev->nsteps = op->nSteps;
  ev->is_send = op->isSend;
}

/* The members v4, v5 and v6 share (v5/v6 pass their coll.v4 and p2p.v4). */
static void ev_v4(struct nw_ev *ev, const struct nw_coll_v4 *coll, const struct nw_p2p_v4 *p2p,
                  const struct nw_proxy_op *op, const struct nw_kernel_ch_v4 *kch) {
  switch (ev->type) {
  case NW_EV_COLL:
    ev->nccl_seq = coll->seqNumber;
    ev->func = coll->func;
    ev->count = coll->count;
    ev->root_or_peer = coll->root;
    ev->dtype = coll->datatype;
    ev->nch = coll->nChannels;
    ev->algo = coll->algo;
    ev->proto = coll->proto;
    break;
  case NW_EV_P2P:
    ev->func = p2p->func;
    ev->dtype = p2p->datatype;
    ev->count = p2p->count;
    ev->root_or_peer = p2p->peer;
    ev->nch = p2p->nChannels;
    break;
  case NW_EV_PROXY_OP:
    ev_proxy_op(ev, op);
    break;
  case NW_EV_KERNEL_CH:
    ev->channel = kch->channelId;
    ev->timer = kch->pTimer;
    break;
  default:
    break;
  }
}

static void ev_v3(struct nw_ev *ev, const struct nw_descr_v3 *d) {
  *ev = (struct nw_ev){.type = d->type, .parent = d->parentObj, .rank = d->rank};
  switch (ev->type) {
  case NW_EV_COLL:
    ev->has_comm_hash = 1;
    ev->comm_hash = d->coll.commHash;
    ev->nccl_seq = d->coll.seqNumber;
    ev->func = d->coll.func;
    ev->count = d->coll.count;
    ev->root_or_peer = d->coll.root;
    ev->dtype = d->coll.datatype;
    ev->nch = d->coll.nMaxChannels;
    ev->algo = d->coll.algo;
    ev->proto = d->coll.proto;
    break;
  case NW_EV_P2P:
    ev->has_comm_hash = 1;
    ev->comm_hash = d->p2p.commHash;
    ev->func = d->p2p.func;
    ev->dtype = d->p2p.datatype;
    ev->count = d->p2p.count;
    ev->root_or_peer = d->p2p.peer;
    break;
  case NW_EV_PROXY_OP:
    ev_proxy_op(ev, &d->proxyOp);
    break;
  case NW_EV_PROXY_STEP:
    ev->step = d->proxyStep.step;
    break;
  case NW_EV_KERNEL_CH:
    ev->channel = d->kernelCh.channelId;
    break;
  default:
    break;
  }
}

static void ev_v4_descr(struct nw_ev *ev, const struct nw_descr_v4 *d) {
  *ev = (struct nw_ev){.type = d->type, .parent = d->parentObj, .rank = d->rank};
  ev_v4(ev, &d->coll, &d->p2p, &d->proxyOp, &d->kernelCh);
  if (ev->type == NW_EV_PROXY_STEP) ev->step = d->proxyStep.step;
}

/* v5 and v6: a Coll's or P2p's parent is its plan's Group, now in parentGroup. The type is
 * read through its low byte: every type handled here is below 256 and every other one is a
 * single bit above, so this holds even if a release declared the field 8 bits wide (as v3 and
 * v4 do) and left garbage in the padding. */
static void ev_v5(struct nw_ev *ev, uint64_t type, void *parent, int rank, const struct nw_coll_v5 *coll,
                  const struct nw_p2p_v5 *p2p, const struct nw_proxy_op *op, const int *step,
                  const struct nw_kernel_ch_v4 *kch) {
  type &= 0xFF;
  *ev = (struct nw_ev){.type = type, .parent = parent, .rank = rank};
  ev_v4(ev, &coll->v4, &p2p->v4, op, kch);
  if (type == NW_EV_PROXY_STEP) ev->step = *step;
  if (type == NW_EV_COLL) ev->parent = coll->parentGroup;
  if (type == NW_EV_P2P) ev->parent = p2p->parentGroup;
}

int nw_ours_ev(unsigned abi, const void *descr, struct nw_ev *ev) {
  if (!descr) return 0;
  switch (abi) {
  case 3:
    ev_v3(ev, descr);
    break;
  case 4:
    ev_v4_descr(ev, descr);
    break;
  default: { /* v5, and v6 with every member read here at v5's place */
    const struct nw_descr_v5 *d = descr;
    ev_v5(ev, d->type, d->parentObj, d->rank, &d->coll, &d->p2p, &d->proxyOp, &d->proxyStep.step, &d->kernelCh);
    break;
  }
  }
  return 1;
}

/* ---- the watchdog's own entry points, for chain.c ------------------------------------- */

nw_result_t nw_ours_init(unsigned abi, void **ctx, int *mask, uint64_t id, int nnodes, int nranks, int rank,
                         nw_logger_t logfn) {
  return common_init(abi, ctx, mask, id, nnodes, nranks, rank, logfn);
}
void *nw_ours_start(void *ctx, const struct nw_ev *ev) { return start_event(ctx, ev); }
nw_result_t nw_ours_stop(void *h) { return nw_stop(h); }
nw_result_t nw_ours_state(void *h, int state, uint64_t timer) { return nw_state(h, state, timer); }
nw_result_t nw_ours_finalize(void *ctx) { return nw_finalize(ctx); }
int nw_ours_mask(void) { return is_disabled() || !g_reg ? 0 : g_mask; }
struct nw_hdr *nw_ours_header(void) { return g_reg ? &g_reg->hdr : NULL; }
pid_t nw_ours_pid(void) { return g_pid; }

void nw_ours_log(int level, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (g_log) {
    g_log(level, NW_LOG_SUBSYS_INIT, __FILE__, __LINE__, "%s", msg);
  } else {
    fprintf(stderr, "NCCL %s %s\n", level == NW_LOG_WARN ? "WARN" : "INFO", msg);
  }
}

/* ---- the tables NCCL finds: the watchdog alone, or through chain.c when chained -------- */

static inline int chained(void) { return __builtin_expect(__atomic_load_n(&nw_chained, __ATOMIC_RELAXED), 0); }

static nw_result_t v3_init(void **ctx, int *mask) { return nw_chain_init(3, ctx, mask, 0, NULL, -1, -1, -1, NULL); }

static nw_result_t v4_init(void **ctx, int *mask, const char *name, uint64_t hash, int nnodes, int nranks, int rank,
                           nw_logger_t logfn) {
  return nw_chain_init(4, ctx, mask, hash, name, nnodes, nranks, rank, logfn);
}

static nw_result_t v5_init(void **ctx, uint64_t id, int *mask, const char *name, int nnodes, int nranks, int rank,
                           nw_logger_t logfn) {
  return nw_chain_init(5, ctx, mask, id, name, nnodes, nranks, rank, logfn);
}

static nw_result_t v6_init(void **ctx, uint64_t id, int *mask, const char *name, int nnodes, int nranks, int rank,
                           nw_logger_t logfn) {
  return nw_chain_init(6, ctx, mask, id, name, nnodes, nranks, rank, logfn);
}

static nw_result_t v3_start(void *ctx, void **h, struct nw_descr_v3 *d) {
  if (!h) return NW_SUCCESS;
  if (chained()) return nw_chain_start(3, ctx, h, d);
  *h = NULL;
  if (!d) return NW_SUCCESS;
  if (d->type == NW_EV_GROUP) {
    *h = group_start(ctx);
    return NW_SUCCESS;
  }
  struct nw_ev ev;
  ev_v3(&ev, d);
  *h = start_event(ctx, &ev);
  return NW_SUCCESS;
}

static nw_result_t v4_start(void *ctx, void **h, struct nw_descr_v4 *d) {
  if (!h) return NW_SUCCESS;
  if (chained()) return nw_chain_start(4, ctx, h, d);
  *h = NULL;
  if (!d) return NW_SUCCESS;
  if (d->type == NW_EV_GROUP) {
    *h = group_start(ctx);
    return NW_SUCCESS;
  }
  struct nw_ev ev;
  ev_v4_descr(&ev, d);
  *h = start_event(ctx, &ev);
  return NW_SUCCESS;
}

/* v5 and v6 lay out every member read here alike (abi.h asserts it). */
static nw_result_t start_v56(unsigned abi, void *ctx, void **h, struct nw_descr_v5 *d) {
  if (!h) return NW_SUCCESS;
  if (chained()) return nw_chain_start(abi, ctx, h, d);
  *h = NULL;
  if (!d) return NW_SUCCESS;
  if ((d->type & 0xFF) == NW_EV_GROUP) {
    *h = group_start(ctx);
    return NW_SUCCESS;
  }
  struct nw_ev ev;
  ev_v5(&ev, d->type, d->parentObj, d->rank, &d->coll, &d->p2p, &d->proxyOp, &d->proxyStep.step, &d->kernelCh);
  *h = start_event(ctx, &ev);
  return NW_SUCCESS;
}

static nw_result_t v5_start(void *ctx, void **h, struct nw_descr_v5 *d) { return start_v56(5, ctx, h, d); }
static nw_result_t v6_start(void *ctx, void **h, struct nw_descr_v6 *d) {
  return start_v56(6, ctx, h, (struct nw_descr_v5 *)d);
}

static nw_result_t any_stop(void *h) { return chained() ? nw_chain_stop(h) : nw_stop(h); }

static nw_result_t v3_state(void *h, int state, union nw_state_args_v3 *args) {
  if (chained()) return nw_chain_state(3, h, state, args);
  return nw_state(h, state, 0);
}

/* KernelChStop carries the channel's stop time on the GPU; the stopEvent follows. */
static inline uint64_t kch_stop_timer(int state, const union nw_state_args_v4 *args) {
  return state == NW_ST_KERNEL_CH_STOP && args ? args->kernelCh.pTimer : 0;
}

static nw_result_t state_v4up(unsigned abi, void *h, int state, union nw_state_args_v4 *args) {
  if (chained()) return nw_chain_state(abi, h, state, args);
  return nw_state(h, state, kch_stop_timer(state, args));
}

static nw_result_t v4_state(void *h, int state, union nw_state_args_v4 *args) { return state_v4up(4, h, state, args); }
static nw_result_t v5_state(void *h, int state, union nw_state_args_v4 *args) { return state_v4up(5, h, state, args); }
static nw_result_t v6_state(void *h, int state, union nw_state_args_v4 *args) { return state_v4up(6, h, state, args); }

static nw_result_t any_finalize(void *ctx) { return chained() ? nw_chain_finalize(ctx) : nw_finalize(ctx); }

NW_API struct nw_profiler_v3 ncclProfiler_v3 = {NW_PLUGIN_NAME, v3_init, v3_start, any_stop, v3_state, any_finalize};
NW_API struct nw_profiler_v4 ncclProfiler_v4 = {NW_PLUGIN_NAME, v4_init, v4_start, any_stop, v4_state, any_finalize};
NW_API struct nw_profiler_v5 ncclProfiler_v5 = {NW_PLUGIN_NAME, v5_init, v5_start, any_stop, v5_state, any_finalize};
NW_API struct nw_profiler_v6 ncclProfiler_v6 = {NW_PLUGIN_NAME, v6_init, v6_start, any_stop, v6_state, any_finalize};
