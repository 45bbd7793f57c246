package profile

// Byte offsets of layout version 4, mirroring profiler/region.h. TestLayoutMatchesC compiles
// profiler/test/layout.c and compares every one of them with what gcc computes, so a change on
// one side without the other fails the tests.
const (
	// Magic is the region's first 8 bytes, "NCCLWPRF", read as a little-endian uint64.
	Magic uint64 = 0x465250574C43434E
	// LayoutVersion is the only layout this reader decodes; a region of another one is
	// reported with ErrVersion, never guessed at.
	LayoutVersion = 4

	// The defaults of the plugin build; the reader takes the geometry from each header.
	DefaultMaxComms = 64
	DefaultMaxPeers = 64

	headerSize  = 4096
	opSize      = 128
	peerDirSize = 96
	peerSize    = 200
	commHdrSize = 512
	strLen      = 16
	sigSize     = 64
	markSize    = 24
	historySize = 4416
	bwCellSize  = 32
	// A comm's completed-op timings, after its history: NumBWFuncs functions (BWFunc) x
	// NumBWBuckets message size buckets (BucketBounds).
	bwSize = NumBWFuncs * NumBWBuckets * bwCellSize
	// tailSize is what follows a slot's peer rows: its history, then its timings.
	tailSize = historySize + bwSize
	// commFixedSize is a slot's size without its peer rows.
	commFixedSize = commHdrSize + tailSize
	// A comm's history: the newest collective signatures (a ring by position) and the marks,
	// NumMarkLevels levels (every 16, 256, 4096 positions) of marksPerLevel each.
	numSigs       = 64
	numMarkLevels = 3
	marksPerLevel = 4

	// struct nw_hdr
	hdrMagic          = 0
	hdrLayoutVersion  = 8
	hdrHeaderSize     = 12
	hdrRegionSize     = 16
	hdrMaxComms       = 24
	hdrCommSize       = 28
	hdrMaxPeers       = 32
	hdrPeerSize       = 36
	hdrOpSize         = 40
	hdrPID            = 44
	hdrProcStartTicks = 48
	hdrStartUs        = 56
	hdrStartMonoUs    = 64
	hdrProfilerABI    = 72
	hdrNCCLVersion    = 76
	hdrState          = 80
	hdrDisabled       = 84
	hdrExitUs         = 88
	hdrEventMask      = 96
	hdrDroppedComms   = 104
	hdrDroppedEvents  = 112
	hdrDroppedPeers   = 120
	hdrCommsInited    = 128
	hdrCommsFinalized = 136
	hdrRank           = 144
	hdrLocalRank      = 148
	hdrWorldSize      = 152
	hdrLocalWorldSize = 156
	hdrHost           = 160
	hdrJobID          = 224
	hdrDisabledReason = 288
	hdrPluginVersion  = 416
	hdrChainABI       = 448
	hdrChainState     = 452
	hdrChainDropped   = 456
	hdrChainName      = 464
	hdrChainError     = 496
	hdrFieldsEnd      = 592

	// struct nw_op
	opSeq        = 0
	opNCCLSeq    = 8
	opCount      = 16
	opIssueUs    = 24
	opGPUStartUs = 32
	opGPUTimer   = 40
	opRoot       = 48
	opKind       = 52
	opNChannels  = 53
	opKchStarted = 54
	opKchDone    = 55
	opProxyOpen  = 56
	opProcSeq    = 60
	opFunc       = 64
	opDtype      = 80
	opAlgo       = 96
	opProto      = 112

	// struct nw_peer_dir
	pdP2PIssued  = 0
	pdP2PDone    = 8
	pdP2PLastUs  = 16
	pdOpsStarted = 24
	pdOpsDone    = 32
	pdStepsTotal = 40
	pdStepsDone  = 48
	pdLastStepUs = 56
	pdStateUs    = 64
	pdNetUs      = 72
	pdNetSteps   = 80
	pdChannel    = 88
	pdLastState  = 90

	// struct nw_peer
	peerRank = 0
	peerDirs = 8

	// struct nw_comm_hdr
	chSeq           = 0
	chState         = 8
	chGen           = 12
	chCommID        = 16
	chRank          = 24
	chNRanks        = 28
	chNNodes        = 32
	chNPeers        = 36
	chInitUs        = 40
	chCollIssued    = 48
	chCollStarted   = 56
	chCollDone      = 64
	chNCCLSeq       = 72
	chP2PIssued     = 80
	chP2PDone       = 88
	chLastEventUs   = 96
	chLastDoneUs    = 104
	chDroppedEvents = 112
	chDroppedPeers  = 120
	chPending       = 128
	chInflight      = 136
	chLast          = 264
	chMergedOps     = 392
	chTimedColls    = 400
	chQueueUs       = 408
	chBusyUs        = 416

	// struct nw_sig
	sigSeq     = 0
	sigCount   = 8
	sigIssueUs = 16
	sigRoot    = 24
	sigProcSeq = 28
	sigFunc    = 32
	sigDtype   = 48

	// struct nw_mark
	markSeq    = 0
	markDigest = 8
	markTUs    = 16

	// struct nw_history, after the peers of a comm slot
	histSigs   = 0
	histMarks  = numSigs * sigSize
	histDigest = histMarks + numMarkLevels*marksPerLevel*markSize

	// struct nw_bw_cell
	bwOps      = 0
	bwBytes    = 8
	bwExecNs   = 16
	bwGPUTimed = 24
)
