package profile

// layoutTable names every constant above the way profiler/test/layout.c prints it.
var layoutTable = map[string]int{
	"magic": int(Magic), "layout_version": LayoutVersion,
	"max_comms": DefaultMaxComms, "max_peers": DefaultMaxPeers, "str": strLen,
	"sigs": numSigs, "mark_levels": numMarkLevels, "marks_per_level": marksPerLevel,
	"bw_funcs": NumBWFuncs, "bw_buckets": NumBWBuckets, "sizeof.bw_cell": bwCellSize,
	"sizeof.sig": sigSize, "sizeof.mark": markSize, "sizeof.history": historySize,
	"sizeof.hdr": headerSize, "sizeof.op": opSize, "sizeof.peer_dir": peerDirSize, "sizeof.peer": peerSize,
	"sizeof.comm_hdr": commHdrSize, "sizeof.comm_slot": commFixedSize + DefaultMaxPeers*peerSize,
	"sizeof.region": headerSize + DefaultMaxComms*(commFixedSize+DefaultMaxPeers*peerSize),

	"hdr.magic": hdrMagic, "hdr.layout_version": hdrLayoutVersion, "hdr.header_size": hdrHeaderSize,
	"hdr.region_size": hdrRegionSize, "hdr.max_comms": hdrMaxComms, "hdr.comm_size": hdrCommSize,
	"hdr.max_peers": hdrMaxPeers, "hdr.peer_size": hdrPeerSize, "hdr.op_size": hdrOpSize, "hdr.pid": hdrPID,
	"hdr.proc_start_ticks": hdrProcStartTicks, "hdr.start_us": hdrStartUs, "hdr.start_mono_us": hdrStartMonoUs,
	"hdr.profiler_abi": hdrProfilerABI, "hdr.nccl_version": hdrNCCLVersion, "hdr.state": hdrState,
	"hdr.disabled": hdrDisabled, "hdr.exit_us": hdrExitUs, "hdr.event_mask": hdrEventMask,
	"hdr.dropped_comms": hdrDroppedComms, "hdr.dropped_events": hdrDroppedEvents,
	"hdr.dropped_peers": hdrDroppedPeers, "hdr.comms_inited": hdrCommsInited,
	"hdr.comms_finalized": hdrCommsFinalized, "hdr.rank": hdrRank, "hdr.local_rank": hdrLocalRank,
	"hdr.world_size": hdrWorldSize, "hdr.local_world_size": hdrLocalWorldSize, "hdr.host": hdrHost,
	"hdr.job_id": hdrJobID, "hdr.disabled_reason": hdrDisabledReason, "hdr.plugin_version": hdrPluginVersion,
	"hdr.chain_abi": hdrChainABI, "hdr.chain_state": hdrChainState, "hdr.chain_dropped": hdrChainDropped,
	"hdr.chain_name": hdrChainName, "hdr.chain_error": hdrChainError, "hdr.reserved": hdrFieldsEnd,

	"op.seq": opSeq, "op.nccl_seq": opNCCLSeq, "op.count": opCount, "op.issue_us": opIssueUs,
	"op.gpu_start_us": opGPUStartUs, "op.gpu_timer": opGPUTimer, "op.root": opRoot, "op.kind": opKind,
	"op.nchannels": opNChannels, "op.kch_started": opKchStarted, "op.kch_done": opKchDone,
	"op.proxy_open": opProxyOpen, "op.proc_seq": opProcSeq, "op.func": opFunc, "op.dtype": opDtype, "op.algo": opAlgo, "op.proto": opProto,

	"peer_dir.p2p_issued": pdP2PIssued, "peer_dir.p2p_done": pdP2PDone, "peer_dir.p2p_last_us": pdP2PLastUs,
	"peer_dir.ops_started": pdOpsStarted, "peer_dir.ops_done": pdOpsDone, "peer_dir.steps_total": pdStepsTotal,
	"peer_dir.steps_done": pdStepsDone, "peer_dir.last_step_us": pdLastStepUs, "peer_dir.state_us": pdStateUs, "peer_dir.net_us": pdNetUs, "peer_dir.net_steps": pdNetSteps,
	"peer_dir.channel": pdChannel, "peer_dir.last_state": pdLastState,

	"peer.peer": peerRank, "peer.dir": peerDirs,

	"comm_hdr.seq": chSeq, "comm_hdr.state": chState, "comm_hdr.gen": chGen, "comm_hdr.comm_id": chCommID,
	"comm_hdr.rank": chRank, "comm_hdr.nranks": chNRanks, "comm_hdr.nnodes": chNNodes,
	"comm_hdr.npeers": chNPeers, "comm_hdr.init_us": chInitUs, "comm_hdr.coll_issued": chCollIssued,
	"comm_hdr.coll_started": chCollStarted, "comm_hdr.coll_done": chCollDone, "comm_hdr.nccl_seq": chNCCLSeq,
	"comm_hdr.p2p_issued": chP2PIssued, "comm_hdr.p2p_done": chP2PDone, "comm_hdr.last_event_us": chLastEventUs,
	"comm_hdr.last_done_us": chLastDoneUs, "comm_hdr.dropped_events": chDroppedEvents,
	"comm_hdr.dropped_peers": chDroppedPeers, "comm_hdr.pending": chPending, "comm_hdr.inflight": chInflight,
	"comm_hdr.last": chLast, "comm_hdr.merged_ops": chMergedOps,
	"comm_hdr.timed_colls": chTimedColls, "comm_hdr.queue_us": chQueueUs, "comm_hdr.busy_us": chBusyUs,

	"sig.seq": sigSeq, "sig.count": sigCount, "sig.issue_us": sigIssueUs, "sig.root": sigRoot,
	"sig.proc_seq": sigProcSeq, "sig.func": sigFunc, "sig.dtype": sigDtype,
	"mark.seq": markSeq, "mark.digest": markDigest, "mark.t_us": markTUs,
	"history.sigs": histSigs, "history.marks": histMarks, "history.digest": histDigest,

	"comm_slot.peers": commHdrSize, "comm_slot.hist": commHdrSize + DefaultMaxPeers*peerSize,
	"comm_slot.bw": commHdrSize + DefaultMaxPeers*peerSize + historySize,
	"bw_cell.ops":  bwOps, "bw_cell.bytes": bwBytes, "bw_cell.exec_ns": bwExecNs, "bw_cell.gpu_timed": bwGPUTimed,
	"region.comms": headerSize,

	"enum.proc_running": int(ProcRunning), "enum.proc_exited": int(ProcExited),
	"enum.slot_free": slotFree, "enum.slot_live": slotLive,
	"enum.op_none": int(OpNone), "enum.op_coll": int(OpColl), "enum.op_p2p": int(OpP2P),
	"enum.send": dirSend, "enum.recv": dirRecv,
	"enum.bw_allreduce": int(BWAllReduce), "enum.bw_allgather": int(BWAllGather),
	"enum.bw_reducescatter": int(BWReduceScatter), "enum.bw_broadcast": int(BWBroadcast),
	"enum.bw_reduce": int(BWReduce), "enum.bw_send": int(BWSend), "enum.bw_recv": int(BWRecv),
	"enum.bw_other":   int(BWOther),
	"enum.chain_none": int(ChainNone), "enum.chain_active": int(ChainActive), "enum.chain_failed": int(ChainFailed),
}
