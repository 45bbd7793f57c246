/*
 * Prints the region layout as gcc computes it, one "name value" per line, for
 * heartbeat/profile's TestLayoutMatchesC to compare with the Go reader's constants.
 */
#include <stdio.h>

#include "../region.h"

#define SIZE(name, T) printf("sizeof.%s %zu\n", name, sizeof(T))
#define OFF(prefix, T, f) printf("%s.%s %zu\n", prefix, #f, offsetof(T, f))
#define VAL(name, v) printf("%s %llu\n", name, (unsigned long long)(v))

int main(void) {
  VAL("magic", NW_MAGIC);
  VAL("layout_version", NW_LAYOUT_VERSION);
  VAL("max_comms", NW_MAX_COMMS);
  VAL("max_peers", NW_MAX_PEERS);
  VAL("str", NW_STR);
  VAL("sigs", NW_SIGS);
  VAL("mark_levels", NW_MARK_LEVELS);
  VAL("marks_per_level", NW_MARKS_PER_LEVEL);
  VAL("bw_funcs", NW_BW_FUNCS);
  VAL("bw_buckets", NW_BW_BUCKETS);
  VAL("enum.proc_running", NW_PROC_RUNNING);
  VAL("enum.proc_exited", NW_PROC_EXITED);
  VAL("enum.slot_free", NW_SLOT_FREE);
  VAL("enum.slot_live", NW_SLOT_LIVE);
  VAL("enum.op_none", NW_OP_NONE);
  VAL("enum.op_coll", NW_OP_COLL);
  VAL("enum.op_p2p", NW_OP_P2P);
  VAL("enum.send", NW_SEND);
  VAL("enum.recv", NW_RECV);
  VAL("enum.bw_allreduce", NW_BW_ALLREDUCE);
  VAL("enum.bw_allgather", NW_BW_ALLGATHER);
  VAL("enum.bw_reducescatter", NW_BW_REDUCESCATTER);
  VAL("enum.bw_broadcast", NW_BW_BROADCAST);
  VAL("enum.bw_reduce", NW_BW_REDUCE);
  VAL("enum.bw_send", NW_BW_SEND);
  VAL("enum.bw_recv", NW_BW_RECV);
  VAL("enum.bw_other", NW_BW_OTHER);
  VAL("enum.chain_none", NW_CHAIN_NONE);
  VAL("enum.chain_active", NW_CHAIN_ACTIVE);
  VAL("enum.chain_failed", NW_CHAIN_FAILED);

  SIZE("hdr", struct nw_hdr);
  SIZE("op", struct nw_op);
  SIZE("peer_dir", struct nw_peer_dir);
  SIZE("peer", struct nw_peer);
  SIZE("comm_hdr", struct nw_comm_hdr);
  SIZE("sig", struct nw_sig);
  SIZE("mark", struct nw_mark);
  SIZE("history", struct nw_history);
  SIZE("bw_cell", struct nw_bw_cell);
  SIZE("comm_slot", struct nw_comm_slot);
  SIZE("region", struct nw_region);

  OFF("hdr", struct nw_hdr, magic);
  OFF("hdr", struct nw_hdr, layout_version);
  OFF("hdr", struct nw_hdr, header_size);
  OFF("hdr", struct nw_hdr, region_size);
  OFF("hdr", struct nw_hdr, max_comms);
  OFF("hdr", struct nw_hdr, comm_size);
  OFF("hdr", struct nw_hdr, max_peers);
  OFF("hdr", struct nw_hdr, peer_size);
  OFF("hdr", struct nw_hdr, op_size);
  OFF("hdr", struct nw_hdr, pid);
  OFF("hdr", struct nw_hdr, proc_start_ticks);
  OFF("hdr", struct nw_hdr, start_us);
  OFF("hdr", struct nw_hdr, start_mono_us);
  OFF("hdr", struct nw_hdr, profiler_abi);
  OFF("hdr", struct nw_hdr, nccl_version);
  OFF("hdr", struct nw_hdr, state);
  OFF("hdr", struct nw_hdr, disabled);
  OFF("hdr", struct nw_hdr, exit_us);
  OFF("hdr", struct nw_hdr, event_mask);
  OFF("hdr", struct nw_hdr, dropped_comms);
  OFF("hdr", struct nw_hdr, dropped_events);
  OFF("hdr", struct nw_hdr, dropped_peers);
  OFF("hdr", struct nw_hdr, comms_inited);
  OFF("hdr", struct nw_hdr, comms_finalized);
  OFF("hdr", struct nw_hdr, rank);
  OFF("hdr", struct nw_hdr, local_rank);
  OFF("hdr", struct nw_hdr, world_size);
  OFF("hdr", struct nw_hdr, local_world_size);
  OFF("hdr", struct nw_hdr, host);
  OFF("hdr", struct nw_hdr, job_id);
  OFF("hdr", struct nw_hdr, disabled_reason);
  OFF("hdr", struct nw_hdr, plugin_version);
  OFF("hdr", struct nw_hdr, chain_abi);
  OFF("hdr", struct nw_hdr, chain_state);
  OFF("hdr", struct nw_hdr, chain_dropped);
  OFF("hdr", struct nw_hdr, chain_name);
  OFF("hdr", struct nw_hdr, chain_error);
  OFF("hdr", struct nw_hdr, reserved);

  OFF("op", struct nw_op, seq);
  OFF("op", struct nw_op, nccl_seq);
  OFF("op", struct nw_op, count);
  OFF("op", struct nw_op, issue_us);
  OFF("op", struct nw_op, gpu_start_us);
  OFF("op", struct nw_op, gpu_timer);
  OFF("op", struct nw_op, root);
  OFF("op", struct nw_op, kind);
  OFF("op", struct nw_op, nchannels);
  OFF("op", struct nw_op, kch_started);
  OFF("op", struct nw_op, kch_done);
  OFF("op", struct nw_op, proxy_open);
  OFF("op", struct nw_op, proc_seq);
  OFF("op", struct nw_op, func);
  OFF("op", struct nw_op, dtype);
  OFF("op", struct nw_op, algo);
  OFF("op", struct nw_op, proto);

  OFF("peer_dir", struct nw_peer_dir, p2p_issued);
  OFF("peer_dir", struct nw_peer_dir, p2p_done);
  OFF("peer_dir", struct nw_peer_dir, p2p_last_us);
  OFF("peer_dir", struct nw_peer_dir, ops_started);
  OFF("peer_dir", struct nw_peer_dir, ops_done);
  OFF("peer_dir", struct nw_peer_dir, steps_total);
  OFF("peer_dir", struct nw_peer_dir, steps_done);
  OFF("peer_dir", struct nw_peer_dir, last_step_us);
  OFF("peer_dir", struct nw_peer_dir, state_us);
  OFF("peer_dir", struct nw_peer_dir, net_us);
  OFF("peer_dir", struct nw_peer_dir, net_steps);
  OFF("peer_dir", struct nw_peer_dir, channel);
  OFF("peer_dir", struct nw_peer_dir, last_state);

  OFF("peer", struct nw_peer, peer);
  OFF("peer", struct nw_peer, dir);

  OFF("comm_hdr", struct nw_comm_hdr, seq);
  OFF("comm_hdr", struct nw_comm_hdr, state);
  OFF("comm_hdr", struct nw_comm_hdr, gen);
  OFF("comm_hdr", struct nw_comm_hdr, comm_id);
  OFF("comm_hdr", struct nw_comm_hdr, rank);
  OFF("comm_hdr", struct nw_comm_hdr, nranks);
  OFF("comm_hdr", struct nw_comm_hdr, nnodes);
  OFF("comm_hdr", struct nw_comm_hdr, npeers);
  OFF("comm_hdr", struct nw_comm_hdr, init_us);
  OFF("comm_hdr", struct nw_comm_hdr, coll_issued);
  OFF("comm_hdr", struct nw_comm_hdr, coll_started);
  OFF("comm_hdr", struct nw_comm_hdr, coll_done);
  OFF("comm_hdr", struct nw_comm_hdr, nccl_seq);
  OFF("comm_hdr", struct nw_comm_hdr, p2p_issued);
  OFF("comm_hdr", struct nw_comm_hdr, p2p_done);
  OFF("comm_hdr", struct nw_comm_hdr, last_event_us);
  OFF("comm_hdr", struct nw_comm_hdr, last_done_us);
  OFF("comm_hdr", struct nw_comm_hdr, dropped_events);
  OFF("comm_hdr", struct nw_comm_hdr, dropped_peers);
  OFF("comm_hdr", struct nw_comm_hdr, pending);
  OFF("comm_hdr", struct nw_comm_hdr, inflight);
  OFF("comm_hdr", struct nw_comm_hdr, last);
  OFF("comm_hdr", struct nw_comm_hdr, merged_ops);
  OFF("comm_hdr", struct nw_comm_hdr, timed_colls);
  OFF("comm_hdr", struct nw_comm_hdr, queue_us);
  OFF("comm_hdr", struct nw_comm_hdr, busy_us);

  OFF("sig", struct nw_sig, seq);
  OFF("sig", struct nw_sig, count);
  OFF("sig", struct nw_sig, issue_us);
  OFF("sig", struct nw_sig, root);
  OFF("sig", struct nw_sig, proc_seq);
  OFF("sig", struct nw_sig, func);
  OFF("sig", struct nw_sig, dtype);
  OFF("mark", struct nw_mark, seq);
  OFF("mark", struct nw_mark, digest);
  OFF("mark", struct nw_mark, t_us);
  OFF("history", struct nw_history, sigs);
  OFF("history", struct nw_history, marks);
  OFF("history", struct nw_history, digest);

  OFF("comm_slot", struct nw_comm_slot, peers);
  OFF("comm_slot", struct nw_comm_slot, hist);
  OFF("comm_slot", struct nw_comm_slot, bw);
  OFF("bw_cell", struct nw_bw_cell, ops);
  OFF("bw_cell", struct nw_bw_cell, bytes);
  OFF("bw_cell", struct nw_bw_cell, exec_ns);
  OFF("bw_cell", struct nw_bw_cell, gpu_timed);
  OFF("region", struct nw_region, comms);
  return 0;
}
