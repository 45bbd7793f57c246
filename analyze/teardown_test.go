package analyze

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// TestTeardownAfterAHang: post-mortem of a 4-rank job on two hosts where rank 3 stopped,
// then the job was killed 30 s later; the survivors' proxy threads saw their node-mates go
// ("Connection closed by localRank N") within half a second. The report has one finding,
// the hang, whose evidence says the job was torn down; not a crash per dead rank.
func TestTeardownAfterAHang(t *testing.T) {
	start := time.Date(2026, 11, 21, 23, 0, 0, 0, time.UTC)
	stamp := func(d time.Duration) string { return start.Add(d).Format("[2006-01-02 15:04:05.000000] ") }
	dir := t.TempDir()
	for r := 0; r < 4; r++ {
		host, pid := fmt.Sprintf("gpu-%d", r/2), 4000+r
		var b strings.Builder
		fmt.Fprintf(&b, "%s%s:%d:%d [%d] NCCL INFO ncclCommInitRankConfig comm 0x5%d rank %d nranks 4 cudaDev %d nvmlDev %d busId %d0 commId 0xfeedc0de - Init COMPLETE\n",
			stamp(0), host, pid, pid, r%2, r, r, r%2, r%2, r%2+6)
		fmt.Fprintf(&b, "%s%s:%d:%d [%d] NCCL INFO comm 0x5%d rank %d nRanks 4 nNodes 2 localRanks 2 localRank %d MNNVL 0\n",
			stamp(0), host, pid, pid, r%2, r, r, r%2)
		ops := 60
		if r == 3 {
			ops = 41
		}
		for k := 0; k < ops; k++ {
			fmt.Fprintf(&b, "%s%s:%d:%d [%d] NCCL INFO AllReduce: opCount %x sendbuff 0x7f00 recvbuff 0x7f00 count 1048576 datatype 7 op 0 root 0 comm 0x5%d [nranks=4] stream 0x1\n",
				stamp(time.Duration(k)*100*time.Millisecond), host, pid, pid, r%2, k, r)
		}
		if r%2 == 0 { // the survivor of each host sees its node-mate die
			fmt.Fprintf(&b, "%s%s:%d:%d [%d] NCCL INFO [Service thread] Connection closed by localRank 1\n",
				stamp(36*time.Second+time.Duration(r)*200*time.Millisecond), host, pid, pid+9, r%2)
		}
		writeFile(t, dir, fmt.Sprintf("nccl.%s.%d.log", host, pid), b.String())
	}
	rep := run(t, dir)
	var text bytes.Buffer
	if err := rep.Write(&text, true); err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != incident.KindHang || rep.Findings[0].Culprits[0].Rank != 3 {
		t.Fatalf("want one hang of rank 3:\n%s", text.String())
	}
	if !strings.Contains(strings.Join(rep.Findings[0].Evidence, "\n"), "then the job was torn down: 2 ranks on 2 hosts exited within 400ms") {
		t.Fatalf("the hang does not say the job was torn down:\n%s", text.String())
	}
}
