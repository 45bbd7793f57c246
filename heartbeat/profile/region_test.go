package profile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ncclwatch/watchdog/snapshot"
)

// image builds region bytes the way the plugin lays them out, for tests that need a region
// without gcc. Geometry is small so that fuzz seeds stay small.
type image struct {
	b                  []byte
	maxComms, maxPeers int
}

func newImage(maxComms, maxPeers int) *image {
	commSize := commFixedSize + maxPeers*peerSize
	m := &image{b: make([]byte, headerSize+maxComms*commSize), maxComms: maxComms, maxPeers: maxPeers}
	b := m.b
	le.PutUint64(b[hdrMagic:], Magic)
	le.PutUint32(b[hdrLayoutVersion:], LayoutVersion)
	le.PutUint32(b[hdrHeaderSize:], headerSize)
	le.PutUint64(b[hdrRegionSize:], uint64(len(b)))
	le.PutUint32(b[hdrMaxComms:], uint32(maxComms))
	le.PutUint32(b[hdrCommSize:], uint32(commSize))
	le.PutUint32(b[hdrMaxPeers:], uint32(maxPeers))
	le.PutUint32(b[hdrPeerSize:], peerSize)
	le.PutUint32(b[hdrOpSize:], opSize)
	le.PutUint32(b[hdrPID:], 4242)
	le.PutUint64(b[hdrStartUs:], 1_700_000_000_000_000)
	le.PutUint32(b[hdrProfilerABI:], 5)
	le.PutUint32(b[hdrNCCLVersion:], 22809)
	le.PutUint32(b[hdrState:], uint32(ProcRunning))
	le.PutUint64(b[hdrEventMask:], 0x5f)
	le.PutUint64(b[hdrDroppedEvents:], 3)
	le.PutUint64(b[hdrCommsInited:], 2)
	for off, v := range map[int]int32{hdrRank: 1, hdrLocalRank: 1, hdrWorldSize: 2, hdrLocalWorldSize: -1} {
		le.PutUint32(b[off:], uint32(v))
	}
	copy(b[hdrHost:], "vm.example")
	copy(b[hdrJobID:], "job-7")
	copy(b[hdrPluginVersion:], "ncclwatch-profiler 1")
	return m
}

func (m *image) slot(i int) []byte {
	off := headerSize + i*(commFixedSize+m.maxPeers*peerSize)
	return m.b[off : off+commFixedSize+m.maxPeers*peerSize]
}

// comm fills slot i with a live communicator: a collective in flight and one peer.
func (m *image) comm(i int, id uint64) {
	s := m.slot(i)
	le.PutUint64(s[chSeq:], 8)
	le.PutUint32(s[chState:], slotLive)
	le.PutUint32(s[chGen:], 1)
	le.PutUint64(s[chCommID:], id)
	le.PutUint32(s[chRank:], 1)
	le.PutUint32(s[chNRanks:], 2)
	le.PutUint32(s[chNNodes:], 2)
	le.PutUint32(s[chNPeers:], 1)
	le.PutUint64(s[chCollIssued:], 97)
	le.PutUint64(s[chCollStarted:], 92)
	le.PutUint64(s[chCollDone:], 91)
	le.PutUint64(s[chNCCLSeq:], 80)
	le.PutUint32(s[chPending:], 6)
	op := s[chInflight:]
	le.PutUint64(op[opSeq:], 92)
	le.PutUint64(op[opCount:], 6_000_000)
	le.PutUint64(op[opIssueUs:], 1_700_000_000_100_000)
	op[opKind], op[opNChannels], op[opKchStarted] = byte(OpColl), 2, 2
	le.PutUint32(op[opProxyOpen:], 2)
	copy(op[opFunc:], "AllReduce")
	copy(op[opDtype:], "ncclFloat32")
	copy(op[opAlgo:], "RING")
	copy(op[opProto:], "SIMPLE")
	p := s[commHdrSize:]
	le.PutUint32(p[peerRank:], 0)
	send := p[peerDirs:]
	le.PutUint64(send[pdOpsStarted:], 3)
	le.PutUint64(send[pdOpsDone:], 2)
	le.PutUint64(send[pdStepsTotal:], 12)
	le.PutUint64(send[pdStepsDone:], 9)
	le.PutUint16(send[pdChannel:], 1)
	send[pdLastState] = byte(StateSendPeerWait)
}

func TestDecodeTable(t *testing.T) {
	wantComm := Comm{
		Slot: 1, Gen: 1, ID: 0xb612da951d724f0b, Rank: 1, NRanks: 2, NNodes: 2,
		CollIssued: 97, CollStarted: 92, CollDone: 91, NCCLSeq: 80, Pending: 6,
		InFlight: &Op{Kind: OpColl, Seq: 92, Func: "AllReduce", Count: 6_000_000, Datatype: "ncclFloat32",
			Algo: "RING", Proto: "SIMPLE", NChannels: 2, KernelChStarted: 2, ProxyOpen: 2,
			Issued: snapshot.Micros(1_700_000_000_100_000)},
		Peers: []Peer{{Rank: 0, Send: PeerDir{ProxyOps: 3, ProxyOpsDone: 2, Steps: 12, StepsDone: 9,
			State: StateSendPeerWait, Channel: 1}}},
	}
	wantProc := Process{PID: 4242, Host: "vm.example", JobID: "job-7", Rank: 1, LocalRank: 1, WorldSize: 2,
		LocalWorldSize: -1, Started: snapshot.Micros(1_700_000_000_000_000), ABI: 5, NCCLVersion: "2.28.9",
		State: ProcRunning, EventMask: 0x5f, DroppedEvents: 3, CommsInited: 2, Plugin: "ncclwatch-profiler 1"}

	tests := []struct {
		name     string
		edit     func(m *image)
		cut      int // bytes to keep; 0 keeps all
		wantErr  error
		wantBusy []int
		check    func(t *testing.T, r *Region)
	}{
		{name: "valid", check: func(t *testing.T, r *Region) {
			if !reflect.DeepEqual(r.Process, wantProc) {
				t.Errorf("process\n got %+v\nwant %+v", r.Process, wantProc)
			}
			if len(r.Comms) != 1 || !reflect.DeepEqual(r.Comms[0], wantComm) {
				t.Fatalf("comms\n got %+v\nwant [%+v]", r.Comms, wantComm)
			}
			if got := r.Comms[0].ID.String(); got != "0xb612da951d724f0b" {
				t.Errorf("ID %s", got)
			}
			if got := r.Comms[0].Peers[0].Send.OpenProxyOps(); got != 1 {
				t.Errorf("open proxy ops %d", got)
			}
		}},
		{name: "bad magic", edit: func(m *image) { m.b[0] ^= 0xff }, wantErr: ErrNotRegion},
		{name: "zeros", edit: func(m *image) { clear(m.b) }, wantErr: ErrNotRegion},
		{name: "other version", edit: func(m *image) { le.PutUint32(m.b[hdrLayoutVersion:], 1) }, wantErr: ErrVersion},
		{name: "other version, short file", edit: func(m *image) { le.PutUint32(m.b[hdrLayoutVersion:], 9) },
			cut: 16, wantErr: ErrVersion},
		{name: "empty", cut: -1, wantErr: ErrTruncated},
		{name: "magic only", cut: 8, wantErr: ErrTruncated},
		{name: "half a header", cut: headerSize / 2, wantErr: ErrTruncated},
		{name: "header only", cut: headerSize, wantErr: ErrTruncated},
		{name: "last byte missing", cut: headerSize + 3*(commHdrSize+2*peerSize) - 1, wantErr: ErrTruncated},
		{name: "op size differs", edit: func(m *image) { le.PutUint32(m.b[hdrOpSize:], 120) }, wantErr: ErrCorrupt},
		{name: "slot size differs", edit: func(m *image) { le.PutUint32(m.b[hdrCommSize:], 9) }, wantErr: ErrCorrupt},
		{name: "region size differs", edit: func(m *image) { le.PutUint64(m.b[hdrRegionSize:], 1<<40) }, wantErr: ErrCorrupt},
		{name: "no slots", edit: func(m *image) { le.PutUint32(m.b[hdrMaxComms:], 0) }, wantErr: ErrCorrupt},
		{name: "too many peers in use", edit: func(m *image) { le.PutUint32(m.slot(1)[chNPeers:], 3) }, wantErr: ErrCorrupt},
		{name: "unknown slot state", edit: func(m *image) { le.PutUint32(m.slot(2)[chState:], 7) }, wantErr: ErrCorrupt},
		{name: "slot being written", edit: func(m *image) { le.PutUint64(m.slot(1)[chSeq:], 9) }, wantBusy: []int{1},
			check: func(t *testing.T, r *Region) {
				if len(r.Comms) != 0 {
					t.Errorf("a busy slot was decoded: %+v", r.Comms)
				}
			}},
		{name: "freed slot", edit: func(m *image) { le.PutUint32(m.slot(1)[chState:], slotFree) },
			check: func(t *testing.T, r *Region) {
				if len(r.Comms) != 0 {
					t.Errorf("a free slot was decoded: %+v", r.Comms)
				}
			}},
		{name: "strings not UTF-8, unterminated", edit: func(m *image) {
			copy(m.b[hdrHost:hdrHost+64], strings.Repeat("\xff", 64))
			copy(m.slot(1)[chInflight+opFunc:], "0123456789abcdefXYZ")
			le.PutUint32(m.b[hdrDisabled:], 1)
			copy(m.b[hdrDisabledReason:], "cannot create /dev/shm/x: No space left on device")
		}, check: func(t *testing.T, r *Region) {
			if r.Process.Host != "\uFFFD" {
				t.Errorf("host %q", r.Process.Host)
			}
			if f := r.Comms[0].InFlight.Func; f != "0123456789abcdef" {
				t.Errorf("func %q", f)
			}
			if !r.Process.Disabled || !strings.Contains(r.Process.DisabledReason, "No space") {
				t.Errorf("disabled %v %q", r.Process.Disabled, r.Process.DisabledReason)
			}
		}},
		{name: "old version code", edit: func(m *image) { le.PutUint32(m.b[hdrNCCLVersion:], 2708) },
			check: func(t *testing.T, r *Region) {
				if r.Process.NCCLVersion != "2.7.8" {
					t.Errorf("version %q", r.Process.NCCLVersion)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newImage(3, 2)
			m.comm(1, 0xb612da951d724f0b)
			if tc.edit != nil {
				tc.edit(m)
			}
			b := m.b
			switch {
			case tc.cut < 0:
				b = nil
			case tc.cut > 0:
				b = b[:tc.cut]
			}
			r, err := Decode(b)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || r != nil {
					t.Fatalf("Decode = %v, %v; want error %v", r, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(r.Busy, tc.wantBusy) {
				t.Errorf("busy %v, want %v", r.Busy, tc.wantBusy)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

func TestVersionErrorSaysBoth(t *testing.T) {
	m := newImage(1, 1)
	le.PutUint32(m.b[hdrLayoutVersion:], LayoutVersion+1)
	_, err := Decode(m.b)
	var ve *VersionError
	if !errors.As(err, &ve) || ve.Version != LayoutVersion+1 ||
		!strings.Contains(err.Error(), fmt.Sprintf("%d (this reader knows %d)", LayoutVersion+1, LayoutVersion)) {
		t.Fatalf("err %v", err)
	}
}

func TestScanAndRead(t *testing.T) {
	dir := t.TempDir()
	good := newImage(2, 1)
	good.comm(0, 0xabc)
	other := newImage(1, 1)
	le.PutUint32(other.b[hdrLayoutVersion:], 1) // the first plugin's layout
	files := map[string][]byte{
		FileName("vm", 10):                  good.b,
		FileName("vm", 11):                  good.b[:headerSize+5],
		FileName("vm", 12):                  other.b,
		FileName("vm", 13):                  []byte("garbage, not a region at all"),
		".ncclwatch-prof.vm.14.tmp":         good.b, // being created: not listed
		"nccl.vm.10.log":                    []byte("x"),
		FilePrefix + FileSuffix:             good.b, // no host, no pid
		filepath.Join("sub") + FileSuffix:   good.b,
		FileName("host-with-dash", 1234567): good.b,
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	found, err := Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]error{
		FileName("host-with-dash", 1234567): nil, FileName("vm", 10): nil, FileName("vm", 11): ErrTruncated,
		FileName("vm", 12): ErrVersion, FileName("vm", 13): ErrNotRegion,
	}
	if len(found) != len(want) {
		t.Fatalf("found %d files, want %d: %+v", len(found), len(want), found)
	}
	for _, f := range found {
		w, ok := want[filepath.Base(f.Path)]
		switch {
		case !ok:
			t.Errorf("unexpected %s", f.Path)
		case w == nil && (f.Err != nil || f.Region == nil || len(f.Region.Comms) != 1 || f.Region.Path != f.Path):
			t.Errorf("%s: %+v, %v", f.Path, f.Region, f.Err)
		case w != nil && (!errors.Is(f.Err, w) || !strings.Contains(f.Err.Error(), f.Path)):
			t.Errorf("%s: error %v, want %v naming the file", f.Path, f.Err, w)
		}
	}
	if _, err := Scan(filepath.Join(dir, "missing")); err == nil {
		t.Error("Scan of a missing directory succeeded")
	}
	if _, err := Read(filepath.Join(dir, "missing.bin")); err == nil {
		t.Error("Read of a missing file succeeded")
	}
}

func TestProxyStateNames(t *testing.T) {
	for s, want := range map[ProxyState]string{StateSendPeerWait: "SendPeerWait", StateRecvWait: "RecvWait", 77: "state77"} {
		if s.String() != want {
			t.Errorf("%d: %s, want %s", s, s, want)
		}
	}
	if (Process{ABI: 5}).NCCLRange() != "2.28" || (Process{}).NCCLRange() != "" {
		t.Error("NCCLRange")
	}
}
