/*
 * The shared-memory region one training process writes and the sidecar maps read-only
 * (Go reader: heartbeat/profile). Layout version 4; fixed-width fields, native byte order
 * (little-endian on every supported target), explicit padding, 64-byte aligned slots.
 * heartbeat/profile's layout test compiles profiler/test/layout.c against this file and
 * compares every offset with the Go constants, so the two sides cannot drift: change a field
 * here and bump NW_LAYOUT_VERSION together with the Go side.
 *
 * Version 2 (plugin 2) added each op's place in the process's issue order (proc_seq), each
 * peer direction's network time of send steps (net_us, net_steps), and per comm the ops merged
 * past the tracking ring (merged_ops) and the summed queue and busy times of completed
 * collectives (timed_colls, queue_us, busy_us).
 *
 * Version 3 (plugin 3) added each comm slot's history after its peers: the signatures of its
 * newest collectives (a ring by position) and a chained digest of every signature with marks
 * at positions that are multiples of 16, 256 and 4096, so the detector can compare what the
 * ranks called (a size or type mismatch that completes) without NCCL's INFO lines.
 *
 * Version 4 (plugin 4) added each comm slot's completed-op timings after its history: per
 * collective function (and Send, Recv) and message size bucket, the ops timed, their bytes and
 * their summed execution time (the GPU's own clock from the kernel channels' start to their
 * stop where NCCL gives it), from which the sidecar derives algorithm and bus bandwidth; and
 * the header's account of a chained second profiler plugin (NCCLWATCH_PROFILER_CHAIN).
 *
 * Concurrency: the header's static part is written before the file is renamed into place.
 * Its counters and flags change later through 8- or 4-byte atomic stores. Each comm slot is
 * guarded by its own seqlock (seq odd while a writer is inside); a reader copies a slot
 * between two loads of seq and retries when they differ or are odd.
 */
#ifndef NCCLWATCH_PROFILER_REGION_H
#define NCCLWATCH_PROFILER_REGION_H

#include <stddef.h>
#include <stdint.h>

#define NW_MAGIC 0x465250574C43434EULL /* the bytes "NCCLWPRF" read as a little-endian u64 */
#define NW_LAYOUT_VERSION 4
#define NW_MAX_COMMS 64
#define NW_MAX_PEERS 64
#define NW_HEADER_SIZE 4096
#define NW_STR 16 /* op strings (func, datatype, algo, proto), NUL-padded */
#define NW_SIGS 64          /* newest collective signatures kept per comm (a power of two) */
#define NW_MARK_LEVELS 3    /* marks every 16, 256 and 4096 positions */
#define NW_MARKS_PER_LEVEL 4
/* Completed-op timings: per function (enum nw_bw_func) and message size bucket. Bucket b holds
 * messages of [16^(b-1) * 4 KiB, 16^b * 4 KiB) bytes (count x datatype size, per rank): b 0
 * below 4 KiB, 1 below 64 KiB, 2 below 1 MiB, 3 below 16 MiB, 4 below 256 MiB, 5 the rest. */
#define NW_BW_FUNCS 8
#define NW_BW_BUCKETS 6

enum nw_proc_state { NW_PROC_RUNNING = 1, NW_PROC_EXITED = 2 };
enum nw_slot_state { NW_SLOT_FREE = 0, NW_SLOT_LIVE = 1 };
enum nw_op_kind { NW_OP_NONE = 0, NW_OP_COLL = 1, NW_OP_P2P = 2 };
enum nw_dir { NW_SEND = 0, NW_RECV = 1 };
enum nw_bw_func {
  NW_BW_ALLREDUCE = 0, NW_BW_ALLGATHER = 1, NW_BW_REDUCESCATTER = 2, NW_BW_BROADCAST = 3, NW_BW_REDUCE = 4,
  NW_BW_SEND = 5, NW_BW_RECV = 6, NW_BW_OTHER = 7
};
enum nw_chain_state { NW_CHAIN_NONE = 0, NW_CHAIN_ACTIVE = 1, NW_CHAIN_FAILED = 2 };

struct nw_hdr {
  uint64_t magic;
  uint32_t layout_version;
  uint32_t header_size; /* comm slots start here */
  uint64_t region_size;
  uint32_t max_comms;
  uint32_t comm_size; /* bytes per comm slot */
  uint32_t max_peers;
  uint32_t peer_size;
  uint32_t op_size;
  int32_t pid;
  uint64_t proc_start_ticks; /* /proc/self/stat field 22: tells a reused pid apart */
  uint64_t start_us;         /* CLOCK_REALTIME µs when the region was created */
  uint64_t start_mono_us;    /* CLOCK_MONOTONIC µs at the same moment */
  uint32_t profiler_abi;     /* 3..6: the ncclProfiler_vN NCCL picked; 0 before the first init */
  uint32_t nccl_version;     /* NCCL_VERSION_CODE from ncclGetVersion, e.g. 22809; 0 unknown */
  uint32_t state;            /* nw_proc_state */
  uint32_t disabled;         /* 1: the plugin stopped recording; reason below */
  uint64_t exit_us;
  uint64_t event_mask; /* the activation mask we asked NCCL for */
  uint64_t dropped_comms;
  uint64_t dropped_events;
  uint64_t dropped_peers;
  uint64_t comms_inited;
  uint64_t comms_finalized;
  int32_t rank; /* RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE; -1 when unset */
  int32_t local_rank;
  int32_t world_size;
  int32_t local_world_size;
  char host[64];
  char job_id[64]; /* TORCHELASTIC_RUN_ID, else SLURM_JOB_ID */
  char disabled_reason[128];
  char plugin_version[32];
  /* A second profiler plugin NCCLWATCH_PROFILER_CHAIN names, called beside this one. */
  uint32_t chain_abi;   /* the ncclProfiler_vN of it in use; 0 none */
  uint32_t chain_state; /* nw_chain_state */
  uint64_t chain_dropped; /* events it did not get: no handle pair left, or a parent gone stale */
  char chain_name[32];    /* its own name field */
  char chain_error[96];   /* why it is not in use (chain_state FAILED) */
  uint8_t reserved[NW_HEADER_SIZE - 592];
};

/* One operation as the region shows it: the oldest unfinished one and the newest issued. */
struct nw_op {
  uint64_t seq;      /* coll: our per-comm issue counter; p2p: per (peer, direction) counter */
  uint64_t nccl_seq; /* coll: NCCL's seqNumber (per comm and per function) */
  uint64_t count;
  uint64_t issue_us;
  uint64_t gpu_start_us; /* host time the first kernel channel was seen running; 0 not yet */
  uint64_t gpu_timer;    /* GPU globaltimer (ns) at the first channel's start, v4+ */
  int32_t root;          /* coll: root; p2p: peer */
  uint8_t kind;          /* nw_op_kind */
  uint8_t nchannels;
  uint8_t kch_started;
  uint8_t kch_done;
  uint32_t proxy_open; /* proxy ops started and not yet stopped */
  uint32_t proc_seq;   /* issue order across every comm of the process (low 32 bits); 0 unknown */
  char func[NW_STR];
  char dtype[NW_STR];
  char algo[NW_STR];
  char proto[NW_STR];
};

/* Per peer and direction: p2p counts and network proxy progress. Steps are cumulative over
 * every proxy op with this peer: steps_total grows when a proxy op starts (by its nSteps),
 * steps_done when a step finishes (or by what was left when the op stops). */
struct nw_peer_dir {
  uint64_t p2p_issued;
  uint64_t p2p_done;
  uint64_t p2p_last_us;
  uint64_t ops_started;
  uint64_t ops_done;
  uint64_t steps_total;
  uint64_t steps_done;
  uint64_t last_step_us;
  uint64_t state_us; /* time of last_state */
  /* Send only: µs from a step's SendWait (handed to the network) to its end, summed, and the
   * steps summed: the link's own time per step, whatever the ranks around it do. */
  uint64_t net_us;
  uint64_t net_steps;
  uint16_t channel;  /* channel of the newest proxy op */
  uint8_t last_state; /* last ncclProfilerEventState_t of a step or op (e.g. 20 SendPeerWait) */
  uint8_t pad[5];
};

struct nw_peer {
  int32_t peer; /* rank in the communicator */
  uint32_t pad;
  struct nw_peer_dir dir[2]; /* nw_dir */
};

struct nw_comm_hdr {
  uint64_t seq;   /* seqlock */
  uint32_t state; /* nw_slot_state */
  uint32_t gen;   /* bumped each time the slot is taken */
  uint64_t comm_id;
  int32_t rank;
  int32_t nranks;
  int32_t nnodes;
  uint32_t npeers; /* peers[0..npeers) in use */
  uint64_t init_us;
  uint64_t coll_issued;  /* collectives issued (Coll events started) */
  uint64_t coll_started; /* newest collective whose kernel started on the GPU */
  uint64_t coll_done;    /* every collective up to this one has completed */
  uint64_t nccl_seq;     /* NCCL's seqNumber of the newest collective */
  uint64_t p2p_issued;
  uint64_t p2p_done;
  uint64_t last_event_us;
  uint64_t last_done_us; /* when an op last completed */
  uint64_t dropped_events;
  uint64_t dropped_peers;
  uint32_t pending; /* ops tracked and not complete */
  uint32_t pad;
  struct nw_op inflight; /* the oldest op not complete; kind NONE when idle */
  struct nw_op last;     /* the newest op issued */
  uint64_t merged_ops;   /* ops issued past the ring: they share the newest entry's completion */
  /* Completed collectives whose kernel start was seen, and their summed µs from issue to the
   * kernel's start (queue) and from it to completion (busy): a rank that arrives late waits
   * least, so its busy time per op is the shortest of its communicator's. */
  uint64_t timed_colls;
  uint64_t queue_us;
  uint64_t busy_us;
  uint8_t reserved[88];
};

/* What a collective was called with: the fields every rank must agree on. */
struct nw_sig {
  uint64_t seq; /* position on the comm (as coll_issued counts); 0: entry unused */
  uint64_t count;
  uint64_t issue_us;
  int32_t root;
  uint32_t proc_seq;
  char func[NW_STR];
  char dtype[NW_STR];
};

/* The digest of every signature up to seq, and when seq was issued. */
struct nw_mark {
  uint64_t seq; /* 0: unused */
  uint64_t digest;
  uint64_t t_us;
};

/* A comm's call history: sigs[(seq - 1) % NW_SIGS] holds position seq while it is among the
 * newest NW_SIGS; marks[level][(seq / every) % NW_MARKS_PER_LEVEL] the mark at seq. */
struct nw_history {
  struct nw_sig sigs[NW_SIGS];
  struct nw_mark marks[NW_MARK_LEVELS][NW_MARKS_PER_LEVEL];
  uint64_t digest; /* of every collective issued (coll_issued of them) */
  uint8_t pad[24];
};

/* Completed operations of one function and size bucket that were timed: their count, bytes
 * (count x datatype size each) and summed execution time; gpu_timed of them by the GPU's clock
 * (the kernel channels' globaltimer at start and stop, ABI v4+), the others by the host's clock
 * from the first channel seen running to completion. Cumulative: readers take differences. */
struct nw_bw_cell {
  uint64_t ops;
  uint64_t bytes;
  uint64_t exec_ns;
  uint64_t gpu_timed;
};

struct nw_comm_slot {
  struct nw_comm_hdr h;
  struct nw_peer peers[NW_MAX_PEERS];
  struct nw_history hist;
  struct nw_bw_cell bw[NW_BW_FUNCS][NW_BW_BUCKETS];
};

struct nw_region {
  struct nw_hdr hdr;
  struct nw_comm_slot comms[NW_MAX_COMMS];
};

_Static_assert(sizeof(struct nw_hdr) == NW_HEADER_SIZE, "header is one page");
_Static_assert(offsetof(struct nw_hdr, host) == 160, "header strings start at 160");
_Static_assert(offsetof(struct nw_hdr, chain_abi) == 448, "chain fields start at 448");
_Static_assert(offsetof(struct nw_hdr, reserved) == 592, "header fields end at 592");
_Static_assert(sizeof(struct nw_op) == 128, "op is 128 bytes");
_Static_assert(sizeof(struct nw_peer_dir) == 96, "peer direction is 96 bytes");
_Static_assert(sizeof(struct nw_peer) == 200, "peer is 200 bytes");
_Static_assert(sizeof(struct nw_comm_hdr) == 512, "comm header is 512 bytes");
_Static_assert(sizeof(struct nw_sig) == 64, "signature is 64 bytes");
_Static_assert(sizeof(struct nw_mark) == 24, "mark is 24 bytes");
_Static_assert(sizeof(struct nw_history) % 64 == 0, "history is whole cache lines");
_Static_assert(offsetof(struct nw_comm_slot, hist) == sizeof(struct nw_comm_hdr) + NW_MAX_PEERS * sizeof(struct nw_peer),
               "history follows the peers");
_Static_assert(sizeof(struct nw_bw_cell) == 32, "timing cell is 32 bytes");
_Static_assert(sizeof(struct nw_bw_cell) * NW_BW_FUNCS * NW_BW_BUCKETS % 64 == 0, "timings are whole cache lines");
_Static_assert(sizeof(struct nw_comm_slot) % 64 == 0, "comm slots stay cache-line aligned");
_Static_assert(offsetof(struct nw_region, comms) == NW_HEADER_SIZE, "slots follow the header");

#endif
