// ratelimit: an LD_PRELOAD shim that limits how fast one process sends on its TCP sockets,
// a "slow link" fault for the e2e GPU test (NCCL's socket transport sends with send()).
//
//   gcc -O2 -shared -fPIC -o bin/ratelimit.so e2e/gpu/ratelimit/shim.c -ldl -lpthread
//   RATELIMIT_FILE=/run/x/rank%r.rate LD_PRELOAD=bin/ratelimit.so torchrun ... job.py
//
// The rate is read at run time from the file RATELIMIT_FILE names (`%r` becomes $RANK, so
// one setting serves every rank of a torchrun job and each rank has its own file; with `%r`
// and no RANK, as in torchrun's own agent, the shim does nothing). The file holds bytes per
// second, with an optional K, M or G suffix (powers of 1000); 0, an empty file or no file
// means unlimited. It is read again at most every 100 ms, so a harness can turn the fault
// on and off while the job runs. While a limit is set, the shim writes what it did to
// <file>.stats (JSON, at most every 100 ms) so a run can show the fault really bit.
//
// Wrapped: send, sendto, sendmsg, write, writev, on TCP (AF_INET/AF_INET6 stream) sockets
// only; everything else passes straight through. A limited call sends at most ~2 ms worth
// of bytes (a partial write, which every sender of a stream socket must handle) after
// waiting for its turn on a virtual clock shared by all threads of the process (NCCL's
// proxy and helper threads send concurrently), so the process as a whole keeps to the rate
// with at most ~2 ms of burst. Errors and return values of the real call pass through
// unchanged; bytes a call did not send are given back to the clock. With no limit set the
// cost is one atomic load and a clock read every 100 ms.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define RELOAD_NS 100000000LL   // re-read the control file at most this often
#define SLICE_NS 2000000LL      // a limited call sends at most this much time's worth of bytes
#define BURST_NS 2000000LL      // idle time banked for a burst
#define MIN_CHUNK 1024          // ... but at least this many bytes (unless fewer were asked)
#define MAX_IOV 1024

typedef ssize_t (*send_fn)(int, const void *, size_t, int);
typedef ssize_t (*sendto_fn)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
typedef ssize_t (*sendmsg_fn)(int, const struct msghdr *, int);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);

static send_fn real_send;
static sendto_fn real_sendto;
static sendmsg_fn real_sendmsg;
static write_fn real_write;
static writev_fn real_writev;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char ctl_path[4096];     // empty: the shim is off for good
static char stats_path[4200];
static _Atomic uint64_t rate_bps;        // bytes per second; 0: unlimited
static _Atomic int64_t next_reload_ns;    // 0: never read yet
static pthread_mutex_t reload_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t clock_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t next_free_ns;             // the virtual link is busy until then (clock_mu)
static _Atomic uint64_t st_bytes, st_calls, st_slept_ns;
static uint64_t st_written_calls = UINT64_MAX;  // (reload_mu) calls count at the last stats write

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// resolve finds the real functions and the control file (once, on first use).
static void resolve(void) {
  real_send = (send_fn)dlsym(RTLD_NEXT, "send");
  real_sendto = (sendto_fn)dlsym(RTLD_NEXT, "sendto");
  real_sendmsg = (sendmsg_fn)dlsym(RTLD_NEXT, "sendmsg");
  real_write = (write_fn)dlsym(RTLD_NEXT, "write");
  real_writev = (writev_fn)dlsym(RTLD_NEXT, "writev");
  const char *f = getenv("RATELIMIT_FILE");
  if (!f || !*f) return;
  const char *rank = getenv("RANK");
  size_t o = 0;
  for (const char *p = f; *p && o + 32 < sizeof ctl_path; p++) {
    if (p[0] == '%' && p[1] == 'r') {
      if (!rank || !*rank) { ctl_path[0] = 0; return; }  // torchrun's agent: not a rank
      o += (size_t)snprintf(ctl_path + o, sizeof ctl_path - o, "%.16s", rank);
      p++;
    } else {
      ctl_path[o++] = *p;
    }
  }
  ctl_path[o] = 0;
  snprintf(stats_path, sizeof stats_path, "%s.stats", ctl_path);
}

static void init(void) { pthread_once(&once, resolve); }

// parse_rate reads "12.5M"-style text: bytes per second, 0 when empty or bad.
static uint64_t parse_rate(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || v <= 0) return 0;
  while (*end == ' ' || *end == '\t') end++;
  switch (*end) {
    case 'k': case 'K': v *= 1e3; break;
    case 'm': case 'M': v *= 1e6; break;
    case 'g': case 'G': v *= 1e9; break;
    default: break;
  }
  if (v < 1) return 0;
  if (v > 1e15) v = 1e15;
  return (uint64_t)v;
}

static void write_stats(uint64_t rate) {
  uint64_t calls = atomic_load(&st_calls);
  if (calls == st_written_calls) return;
  st_written_calls = calls;
  char tmp[4300], buf[512];
  snprintf(tmp, sizeof tmp, "%s.tmp", stats_path);
  int n = snprintf(buf, sizeof buf,
                   "{\"pid\": %d, \"rate_bps\": %llu, \"limited_calls\": %llu, \"limited_bytes\": %llu, \"slept_ns\": %llu}\n",
                   (int)getpid(), (unsigned long long)rate, (unsigned long long)calls,
                   (unsigned long long)atomic_load(&st_bytes), (unsigned long long)atomic_load(&st_slept_ns));
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ssize_t w = real_write ? real_write(fd, buf, (size_t)n) : syscall(SYS_write, fd, buf, (size_t)n);
  close(fd);
  if (w == n) rename(tmp, stats_path);
}

// current_rate is the limit now in force, re-reading the control file when it is due.
static uint64_t current_rate(void) {
  if (!ctl_path[0]) return 0;
  int64_t now = mono_ns();
  int64_t due = atomic_load(&next_reload_ns);
  if (now < due) return atomic_load(&rate_bps);
  if (due == 0) {
    pthread_mutex_lock(&reload_mu);  // the first read: everyone waits for it
  } else if (pthread_mutex_trylock(&reload_mu) != 0) {
    return atomic_load(&rate_bps);   // another thread is reading it: the last value holds meanwhile
  }
  if (now >= atomic_load(&next_reload_ns)) {
    char buf[64] = {0};
    uint64_t r = 0;
    int fd = open(ctl_path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t n = read(fd, buf, sizeof buf - 1);
      close(fd);
      if (n > 0) { buf[n] = 0; r = parse_rate(buf); }
    }
    atomic_store(&rate_bps, r);
    if (r || st_written_calls != UINT64_MAX) write_stats(r);
    atomic_store(&next_reload_ns, now + RELOAD_NS);
  }
  pthread_mutex_unlock(&reload_mu);
  return atomic_load(&rate_bps);
}

// At exit, the last word on what was limited (the periodic write may be up to 100 ms old).
__attribute__((destructor)) static void final_stats(void) {
  if (!ctl_path[0] || atomic_load(&st_calls) == 0) return;
  pthread_mutex_lock(&reload_mu);
  write_stats(atomic_load(&rate_bps));
  pthread_mutex_unlock(&reload_mu);
}

// tcp reports whether fd is a TCP (or other internet stream) socket.
static int tcp(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  int v = 0;
  socklen_t l = sizeof v;
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) != 0 || (v != AF_INET && v != AF_INET6)) return 0;
  l = sizeof v;
  return getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &l) == 0 && v == SOCK_STREAM;
}

static int64_t cost_ns(size_t bytes, uint64_t rate) { return (int64_t)((double)bytes * 1e9 / (double)rate); }

// admit waits for this call's turn and returns how many of len bytes it may send (>= 1 when
// len >= 1); 0 means unlimited (send everything, no accounting).
static size_t admit(int fd, size_t len, uint64_t *rate_out) {
  uint64_t rate = current_rate();
  *rate_out = rate;
  if (!rate || len == 0 || !tcp(fd)) return 0;
  size_t chunk = (size_t)((double)rate * SLICE_NS / 1e9);
  if (chunk < MIN_CHUNK) chunk = MIN_CHUNK;
  if (chunk > len) chunk = len;
  pthread_mutex_lock(&clock_mu);
  int64_t now = mono_ns();
  if (next_free_ns < now - BURST_NS) next_free_ns = now - BURST_NS;
  int64_t start = next_free_ns;
  next_free_ns += cost_ns(chunk, rate);
  pthread_mutex_unlock(&clock_mu);
  if (start > now) {
    struct timespec until = {.tv_sec = start / 1000000000LL, .tv_nsec = start % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
    }
    atomic_fetch_add(&st_slept_ns, (uint64_t)(start - now));
  }
  atomic_fetch_add(&st_calls, 1);
  return chunk;
}

// settle gives back the reserved time of bytes a limited call did not send.
static void settle(size_t chunk, ssize_t sent, uint64_t rate) {
  size_t unsent = sent < 0 ? chunk : (size_t)sent < chunk ? chunk - (size_t)sent : 0;
  if (sent > 0) atomic_fetch_add(&st_bytes, (uint64_t)sent);
  if (!unsent) return;
  pthread_mutex_lock(&clock_mu);
  next_free_ns -= cost_ns(unsent, rate);
  pthread_mutex_unlock(&clock_mu);
}

ssize_t send(int fd, const void *buf, size_t len, int flags) {
  init();
  if (!real_send) return syscall(SYS_sendto, fd, buf, len, flags, NULL, 0);
  uint64_t rate;
  size_t chunk = admit(fd, len, &rate);
  if (!chunk) return real_send(fd, buf, len, flags);
  ssize_t n = real_send(fd, buf, chunk, flags);
  settle(chunk, n, rate);
  return n;
}

ssize_t sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *to, socklen_t tolen) {
  init();
  if (!real_sendto) return syscall(SYS_sendto, fd, buf, len, flags, to, tolen);
  uint64_t rate;
  size_t chunk = admit(fd, len, &rate);
  if (!chunk) return real_sendto(fd, buf, len, flags, to, tolen);
  ssize_t n = real_sendto(fd, buf, chunk, flags, to, tolen);
  settle(chunk, n, rate);
  return n;
}

ssize_t write(int fd, const void *buf, size_t len) {
  init();
  if (!real_write) return syscall(SYS_write, fd, buf, len);
  uint64_t rate;
  size_t chunk = admit(fd, len, &rate);
  if (!chunk) return real_write(fd, buf, len);
  ssize_t n = real_write(fd, buf, chunk);
  settle(chunk, n, rate);
  return n;
}

// clip copies the leading iovecs that hold at most max bytes (the last one cut short).
static int clip(const struct iovec *iov, int cnt, size_t max, struct iovec *out) {
  int k = 0;
  for (int i = 0; i < cnt && k < MAX_IOV && max > 0; i++) {
    out[k] = iov[i];
    if (out[k].iov_len > max) out[k].iov_len = max;
    max -= out[k].iov_len;
    k++;
  }
  return k;
}

static size_t iov_total(const struct iovec *iov, int cnt) {
  size_t t = 0;
  for (int i = 0; i < cnt; i++) t += iov[i].iov_len;
  return t;
}

ssize_t writev(int fd, const struct iovec *iov, int cnt) {
  init();
  if (!real_writev) return syscall(SYS_writev, fd, iov, cnt);
  if (cnt <= 0 || cnt > MAX_IOV) return real_writev(fd, iov, cnt);
  uint64_t rate;
  size_t chunk = admit(fd, iov_total(iov, cnt), &rate);
  if (!chunk) return real_writev(fd, iov, cnt);
  struct iovec part[MAX_IOV];
  int k = clip(iov, cnt, chunk, part);
  ssize_t n = real_writev(fd, part, k);
  settle(chunk, n, rate);
  return n;
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
  init();
  if (!real_sendmsg) return syscall(SYS_sendmsg, fd, msg, flags);
  if (!msg || msg->msg_iovlen <= 0 || msg->msg_iovlen > MAX_IOV) return real_sendmsg(fd, msg, flags);
  uint64_t rate;
  size_t chunk = admit(fd, iov_total(msg->msg_iov, (int)msg->msg_iovlen), &rate);
  if (!chunk) return real_sendmsg(fd, msg, flags);
  struct iovec part[MAX_IOV];
  struct msghdr m = *msg;
  m.msg_iov = part;
  m.msg_iovlen = (size_t)clip(msg->msg_iov, (int)msg->msg_iovlen, chunk, part);
  ssize_t n = real_sendmsg(fd, &m, flags);
  settle(chunk, n, rate);
  return n;
}
