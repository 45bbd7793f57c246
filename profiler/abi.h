/*
 * NCCL's profiler plugin ABI, versions 3 to 6, declared from NCCL's documented interface
 * (src/include/plugin/profiler/profiler_v{3,4,5,6}.h and the ext-profiler / plugins/profiler
 * READMEs of NVIDIA/nccl). NCCL owns every descriptor and state-argument block and we only read
 * members through its pointers, so a union's total size never matters; what matters is the
 * offset of each member we read and the order of the function pointers. The _Static_asserts pin
 * those to the values NCCL's headers give on LP64 (x86-64, aarch64): a mistake here misreads
 * NCCL's memory inside the training process, so a drift must fail the build, not the job.
 */
#ifndef NCCLWATCH_PROFILER_ABI_H
#define NCCLWATCH_PROFILER_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ncclResult_t: an int-sized enum; we only ever return success. */
typedef int nw_result_t;
#define NW_SUCCESS 0

/* ncclDebugLogLevel and the subsystem flags passed to NCCL's logger. */
enum { NW_LOG_WARN = 2, NW_LOG_INFO = 3 };
#define NW_LOG_SUBSYS_INIT 0x1UL

/* ncclDebugLogger_t (v4+): NCCL's own debug logger, handed to init. */
typedef void (*nw_logger_t)(int level, unsigned long flags, const char *file, int line, const char *fmt, ...);

/* Event type bits (ncclProfileGroup ...), also the activation mask. */
enum {
  NW_EV_GROUP = 1 << 0,
  NW_EV_COLL = 1 << 1,
  NW_EV_P2P = 1 << 2,
  NW_EV_PROXY_OP = 1 << 3,
  NW_EV_PROXY_STEP = 1 << 4,
  NW_EV_PROXY_CTRL = 1 << 5,
  NW_EV_KERNEL_CH = 1 << 6,
  NW_EV_NET_PLUGIN = 1 << 7,
  NW_EV_GROUP_API = 1 << 8,
  NW_EV_COLL_API = 1 << 9,
  NW_EV_P2P_API = 1 << 10,
  NW_EV_KERNEL_LAUNCH = 1 << 11,
  NW_EV_CE_COLL = 1 << 12,
  NW_EV_CE_SYNC = 1 << 13,
  NW_EV_CE_BATCH = 1 << 14,
};

/* ncclProfilerEventState_t: one enum shared by every version (values are fixed). */
enum {
  NW_ST_PROXY_OP_SEND_POSTED = 0, /* 0-7: ProxyOp states of v1-v3, deprecated in v4 */
  NW_ST_PROXY_OP_RECV_DONE = 7,
  NW_ST_STEP_SEND_GPU_WAIT = 8,
  NW_ST_STEP_SEND_WAIT = 9,
  NW_ST_STEP_RECV_WAIT = 10,
  NW_ST_STEP_RECV_FLUSH_WAIT = 11,
  NW_ST_STEP_RECV_GPU_WAIT = 12,
  NW_ST_CTRL_IDLE = 13, /* 13-18: ProxyCtrl */
  NW_ST_CTRL_APPEND_END = 18,
  NW_ST_PROXY_OP_IN_PROGRESS = 19, /* v4+ */
  NW_ST_STEP_SEND_PEER_WAIT = 20,  /* v4+ */
  NW_ST_NET_PLUGIN_UPDATE = 21,
  NW_ST_KERNEL_CH_STOP = 22,
  NW_ST_GROUP_START_API_STOP = 23, /* v5+ */
  NW_ST_GROUP_END_API_START = 24,
  NW_ST_CE_FIRST = 25, /* v6: 25-30 */
  NW_ST_CE_LAST = 30,
};

/* Members every version from v3 shares. */

struct nw_proxy_op {
  pid_t pid; /* ncclPid_t: the process that posted the op */
  uint8_t channelId;
  int peer;
  int nSteps;
  int chunkSize;
  int isSend;
};

struct nw_net_plugin {
  int64_t id;
  void *data;
};

/* --- v3 (NCCL 2.26): uint8_t type, comm name and hash inside coll/p2p ------------------ */

struct nw_descr_v3 {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      const char *name;
      uint64_t commHash;
      uint64_t seqNumber;
      const char *func;
      const void *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      const char *algo;
      const char *proto;
    } coll;
    struct {
      const char *name;
      uint64_t commHash;
      const char *func;
      void *buff;
      const char *datatype;
      size_t count;
      int peer;
    } p2p;
    struct nw_proxy_op proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
    } kernelCh;
    struct nw_net_plugin netPlugin;
  };
};

union nw_state_args_v3 {
  struct {
    size_t transSize;
    int steps;
  } proxyOp;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
};

struct nw_profiler_v3 {
  const char *name;
  nw_result_t (*init)(void **context, int *eActivationMask);
  nw_result_t (*startEvent)(void *context, void **eHandle, struct nw_descr_v3 *eDescr);
  nw_result_t (*stopEvent)(void *eHandle);
  nw_result_t (*recordEventState)(void *eHandle, int eState, union nw_state_args_v3 *eStateArgs);
  nw_result_t (*finalize)(void *context);
};

/* --- v4 (NCCL 2.27) to v6: comm identity moves to init, nChannels, kernelCh.pTimer -----
 * Union members shared across versions are named structs: a struct member of a union starts
 * at the union's start, so the offsets are those of NCCL's inline members (asserted below).
 * v5 extends v4's coll and p2p with the plan's Group handle ("for backward compatibility with
 * v4", NCCL's header says): in v5+ a Coll's parentObj is its CollApi event instead. */

struct nw_coll_v4 {
  uint64_t seqNumber;
  const char *func;
  const void *sendBuff;
  void *recvBuff;
  size_t count;
  int root;
  const char *datatype;
  uint8_t nChannels;
  uint8_t nWarps;
  const char *algo;
  const char *proto;
};

struct nw_p2p_v4 {
  const char *func;
  void *buff;
  const char *datatype;
  size_t count;
  int peer;
  uint8_t nChannels;
};

struct nw_coll_v5 {
  struct nw_coll_v4 v4;
  void *parentGroup;
};

struct nw_p2p_v5 {
  struct nw_p2p_v4 v4;
  void *parentGroup;
};

struct nw_kernel_ch_v4 {
  uint8_t channelId;
  uint64_t pTimer; /* GPU globaltimer at the channel's start */
};

struct nw_descr_v4 {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct nw_coll_v4 coll;
    struct nw_p2p_v4 p2p;
    struct nw_proxy_op proxyOp;
    struct {
      int step;
    } proxyStep;
    struct nw_kernel_ch_v4 kernelCh;
    struct nw_net_plugin netPlugin;
  };
};

/* v4, v5 and v6 share this shape for what we read (kernelCh.pTimer at offset 0); later v5
 * releases add a kernelStep member of the same shape. */
union nw_state_args_v4 {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void *data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
};

struct nw_profiler_v4 {
  const char *name;
  nw_result_t (*init)(void **context, int *eActivationMask, const char *commName, uint64_t commHash, int nNodes,
                      int nranks, int rank, nw_logger_t logfn);
  nw_result_t (*startEvent)(void *context, void **eHandle, struct nw_descr_v4 *eDescr);
  nw_result_t (*stopEvent)(void *eHandle);
  nw_result_t (*recordEventState)(void *eHandle, int eState, union nw_state_args_v4 *eStateArgs);
  nw_result_t (*finalize)(void *context);
};

/* v5's API events (never enabled here; a chained plugin gets them whole). */
struct nw_group_api {
  bool graphCaptured;
  int groupDepth;
};

struct nw_coll_api {
  const char *func;
  size_t count;
  const char *datatype;
  int root;
  void *stream;
  bool graphCaptured;
};

struct nw_p2p_api {
  const char *func;
  size_t count;
  const char *datatype;
  void *stream;
  bool graphCaptured;
};

/* v5 (NCCL 2.28): uint64_t type, API events (never enabled here), parentGroup. */
struct nw_descr_v5 {
  uint64_t type;
  void *parentObj;
  int rank;
  union {
    struct nw_group_api groupApi;
    struct nw_coll_api collApi;
    struct nw_p2p_api p2pApi;
    struct {
      void *stream;
    } kernelLaunch;
    struct nw_coll_v5 coll;
    struct nw_p2p_v5 p2p;
    struct nw_proxy_op proxyOp;
    struct {
      int step;
    } proxyStep;
    struct nw_kernel_ch_v4 kernelCh;
    struct nw_net_plugin netPlugin;
  };
};

/* v6 (NCCL 2.29): v5's members at the same places plus copy-engine events (never enabled
 * here; declared so that a chained plugin gets them whole). */
struct nw_descr_v6 {
  uint64_t type;
  void *parentObj;
  int rank;
  union {
    struct nw_group_api groupApi;
    struct nw_coll_api collApi;
    struct nw_p2p_api p2pApi;
    struct {
      void *stream;
    } kernelLaunch;
    struct nw_coll_v5 coll;
    struct nw_p2p_v5 p2p;
    struct nw_proxy_op proxyOp;
    struct {
      int step;
    } proxyStep;
    struct nw_kernel_ch_v4 kernelCh;
    struct nw_net_plugin netPlugin;
    struct {
      uint64_t seqNumber;
      const char *func;
      const void *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      const char *syncStrategy;
      bool intraBatchSync;
      uint32_t batchSize;
      uint32_t numBatches;
      uint32_t ceSeqNum;
      void *stream;
    } ceColl;
    struct {
      bool isComplete;
      int nRanks;
    } ceCollSync;
    struct {
      int numOps;
      size_t totalBytes;
      bool useIntraSync;
    } ceCollBatch;
  };
};

typedef union nw_state_args_v4 nw_state_args_v5;

/* v5 and v6 init: commId comes second, before the mask. */
typedef nw_result_t (*nw_init_v5_fn)(void **context, uint64_t commId, int *eActivationMask, const char *commName,
                                     int nNodes, int nranks, int rank, nw_logger_t logfn);

struct nw_profiler_v5 {
  const char *name;
  nw_init_v5_fn init;
  nw_result_t (*startEvent)(void *context, void **eHandle, struct nw_descr_v5 *eDescr);
  nw_result_t (*stopEvent)(void *eHandle);
  nw_result_t (*recordEventState)(void *eHandle, int eState, nw_state_args_v5 *eStateArgs);
  nw_result_t (*finalize)(void *context);
};

struct nw_profiler_v6 {
  const char *name;
  nw_init_v5_fn init;
  nw_result_t (*startEvent)(void *context, void **eHandle, struct nw_descr_v6 *eDescr);
  nw_result_t (*stopEvent)(void *eHandle);
  nw_result_t (*recordEventState)(void *eHandle, int eState, nw_state_args_v5 *eStateArgs);
  nw_result_t (*finalize)(void *context);
};

/* Offsets on LP64, from NCCL's headers. Any drift fails the build. */
#if defined(__LP64__)
#define NW_AT(T, f, off) _Static_assert(offsetof(T, f) == (off), #T "." #f " must sit at " #off)
NW_AT(struct nw_descr_v3, parentObj, 8);
NW_AT(struct nw_descr_v3, rank, 16);
NW_AT(struct nw_descr_v3, coll.name, 24);
NW_AT(struct nw_descr_v3, coll.commHash, 32);
NW_AT(struct nw_descr_v3, coll.seqNumber, 40);
NW_AT(struct nw_descr_v3, coll.func, 48);
NW_AT(struct nw_descr_v3, coll.count, 72);
NW_AT(struct nw_descr_v3, coll.root, 80);
NW_AT(struct nw_descr_v3, coll.datatype, 88);
NW_AT(struct nw_descr_v3, coll.nMaxChannels, 96);
NW_AT(struct nw_descr_v3, coll.algo, 104);
NW_AT(struct nw_descr_v3, coll.proto, 112);
NW_AT(struct nw_descr_v3, p2p.commHash, 32);
NW_AT(struct nw_descr_v3, p2p.func, 40);
NW_AT(struct nw_descr_v3, p2p.datatype, 56);
NW_AT(struct nw_descr_v3, p2p.count, 64);
NW_AT(struct nw_descr_v3, p2p.peer, 72);
NW_AT(struct nw_descr_v3, proxyOp.pid, 24);
NW_AT(struct nw_descr_v3, proxyOp.channelId, 28);
NW_AT(struct nw_descr_v3, proxyOp.peer, 32);
NW_AT(struct nw_descr_v3, proxyOp.nSteps, 36);
NW_AT(struct nw_descr_v3, proxyOp.isSend, 44);
NW_AT(struct nw_descr_v3, kernelCh.channelId, 24);

NW_AT(struct nw_descr_v4, parentObj, 8);
NW_AT(struct nw_descr_v4, rank, 16);
NW_AT(struct nw_descr_v4, coll.seqNumber, 24);
NW_AT(struct nw_descr_v4, coll.func, 32);
NW_AT(struct nw_descr_v4, coll.count, 56);
NW_AT(struct nw_descr_v4, coll.root, 64);
NW_AT(struct nw_descr_v4, coll.datatype, 72);
NW_AT(struct nw_descr_v4, coll.nChannels, 80);
NW_AT(struct nw_descr_v4, coll.algo, 88);
NW_AT(struct nw_descr_v4, coll.proto, 96);
NW_AT(struct nw_descr_v4, p2p.func, 24);
NW_AT(struct nw_descr_v4, p2p.datatype, 40);
NW_AT(struct nw_descr_v4, p2p.count, 48);
NW_AT(struct nw_descr_v4, p2p.peer, 56);
NW_AT(struct nw_descr_v4, p2p.nChannels, 60);
NW_AT(struct nw_descr_v4, proxyOp.pid, 24);
NW_AT(struct nw_descr_v4, proxyOp.channelId, 28);
NW_AT(struct nw_descr_v4, proxyOp.peer, 32);
NW_AT(struct nw_descr_v4, proxyOp.nSteps, 36);
NW_AT(struct nw_descr_v4, proxyOp.isSend, 44);
NW_AT(struct nw_descr_v4, kernelCh.channelId, 24);
NW_AT(struct nw_descr_v4, kernelCh.pTimer, 32);

NW_AT(struct nw_descr_v5, parentObj, 8);
NW_AT(struct nw_descr_v5, rank, 16);
NW_AT(struct nw_descr_v5, coll.v4.seqNumber, 24);
NW_AT(struct nw_descr_v5, coll.v4.func, 32);
NW_AT(struct nw_descr_v5, coll.v4.count, 56);
NW_AT(struct nw_descr_v5, coll.v4.root, 64);
NW_AT(struct nw_descr_v5, coll.v4.datatype, 72);
NW_AT(struct nw_descr_v5, coll.v4.nChannels, 80);
NW_AT(struct nw_descr_v5, coll.v4.algo, 88);
NW_AT(struct nw_descr_v5, coll.v4.proto, 96);
NW_AT(struct nw_descr_v5, coll.parentGroup, 104);
NW_AT(struct nw_descr_v5, p2p.v4.func, 24);
NW_AT(struct nw_descr_v5, p2p.v4.datatype, 40);
NW_AT(struct nw_descr_v5, p2p.v4.count, 48);
NW_AT(struct nw_descr_v5, p2p.v4.peer, 56);
NW_AT(struct nw_descr_v5, p2p.v4.nChannels, 60);
NW_AT(struct nw_descr_v5, p2p.parentGroup, 64);
NW_AT(struct nw_descr_v5, proxyOp.pid, 24);
NW_AT(struct nw_descr_v5, proxyOp.channelId, 28);
NW_AT(struct nw_descr_v5, proxyOp.peer, 32);
NW_AT(struct nw_descr_v5, proxyOp.nSteps, 36);
NW_AT(struct nw_descr_v5, proxyOp.isSend, 44);
NW_AT(struct nw_descr_v5, kernelCh.channelId, 24);
NW_AT(struct nw_descr_v5, kernelCh.pTimer, 32);

NW_AT(struct nw_descr_v6, parentObj, 8);
NW_AT(struct nw_descr_v6, rank, 16);
NW_AT(struct nw_descr_v6, coll.v4.seqNumber, 24);
NW_AT(struct nw_descr_v6, coll.parentGroup, 104);
NW_AT(struct nw_descr_v6, p2p.parentGroup, 64);
NW_AT(struct nw_descr_v6, proxyOp.isSend, 44);
NW_AT(struct nw_descr_v6, kernelCh.pTimer, 32);

NW_AT(struct nw_descr_v5, groupApi.groupDepth, 28);
NW_AT(struct nw_descr_v5, collApi.stream, 56);
NW_AT(struct nw_descr_v5, collApi.graphCaptured, 64);
NW_AT(struct nw_descr_v5, p2pApi.stream, 48);
NW_AT(struct nw_descr_v5, kernelLaunch.stream, 24);
NW_AT(struct nw_descr_v6, collApi.stream, 56);
NW_AT(struct nw_descr_v6, p2pApi.graphCaptured, 56);
NW_AT(struct nw_descr_v6, ceColl.stream, 104);
NW_AT(struct nw_descr_v6, ceCollBatch.useIntraSync, 40);
NW_AT(struct nw_descr_v3, netPlugin.data, 32);
NW_AT(struct nw_descr_v4, netPlugin.data, 32);
/* Whole descriptors and state arguments: a chained plugin (chain.c) gets copies. */
_Static_assert(sizeof(struct nw_descr_v3) == 120, "v3 descriptor is 120 bytes");
_Static_assert(sizeof(struct nw_descr_v4) == 104, "v4 descriptor is 104 bytes");
_Static_assert(sizeof(struct nw_descr_v5) == 112, "v5 descriptor is 112 bytes");
_Static_assert(sizeof(struct nw_descr_v6) == 112, "v6 descriptor is 112 bytes");
_Static_assert(sizeof(union nw_state_args_v3) == 16, "v3 state arguments are 16 bytes");
_Static_assert(sizeof(union nw_state_args_v4) == 8, "v4-v6 state arguments are 8 bytes");

NW_AT(union nw_state_args_v4, kernelCh.pTimer, 0);
_Static_assert(sizeof(pid_t) == 4, "ncclPid_t is a 4-byte pid_t on Linux");

/* The function-pointer order NCCL dereferences: name, init, startEvent, stopEvent,
 * recordEventState, finalize. */
NW_AT(struct nw_profiler_v3, init, 8);
NW_AT(struct nw_profiler_v3, startEvent, 16);
NW_AT(struct nw_profiler_v3, stopEvent, 24);
NW_AT(struct nw_profiler_v3, recordEventState, 32);
NW_AT(struct nw_profiler_v3, finalize, 40);
_Static_assert(sizeof(struct nw_profiler_v4) == 48, "six pointers");
_Static_assert(sizeof(struct nw_profiler_v5) == 48, "six pointers");
_Static_assert(sizeof(struct nw_profiler_v6) == 48, "six pointers");
#undef NW_AT
#else
#error "the NCCL profiler ABI offsets are only checked for LP64 targets"
#endif

#endif
