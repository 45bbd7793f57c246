package alert

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/ncclwatch/watchdog/incident"
)

// Delivery limits of the services (their documentation): PagerDuty refuses an event over
// 512 KB; a Slack message's limits are checked by validateSlackMessage.
const pagerDutyMaxEventBytes = 512 << 10

// mismatch100k is a collective mismatch on a communicator of every rank of a 100k-rank
// job, as the rules report it: one op per rank; culprits of the minority signature, each
// with a line of evidence.
func mismatch100k(culprits int) incident.Incident {
	inc := sampleMismatch()
	inc.Ops, inc.Culprits, inc.Evidence = map[string]incident.Op{}, nil, nil
	inc.Victims = 100000 - culprits
	for r := range 100000 {
		op := incident.Op{Op: "AllReduce", Count: 1048576, Datatype: "bf16", RedOp: "sum"}
		if r < culprits {
			op = incident.Op{Op: "AllGather", Count: 4194304, Datatype: "bf16"}
			inc.Culprits = append(inc.Culprits, incident.Culprit{Rank: r, Host: fmt.Sprintf("gpu-node-%05d", r/8), PID: 4000 + r})
			inc.Evidence = append(inc.Evidence, fmt.Sprintf("rank %d called AllGather at collective #1842", r))
		}
		inc.Ops[strconv.Itoa(r)] = op
	}
	return inc
}

// TestPayloadsAt100kRanks: a mismatch over 100k ranks, as the dispatcher submits it
// (bounded), fits every service's limit: PagerDuty's 512 KB, Slack's message rules, and
// the webhook's body stays under what the detector stores per incident.
func TestPayloadsAt100kRanks(t *testing.T) {
	for _, culprits := range []int{1, 50000} {
		t.Run(fmt.Sprintf("%d culprits", culprits), func(t *testing.T) {
			inc := incident.Bound(mismatch100k(culprits))
			pd, err := json.Marshal(pagerDutyEvent(inc, EventOpen, testRoutingKey, testLinks))
			if err != nil {
				t.Fatal(err)
			}
			if len(pd) > pagerDutyMaxEventBytes {
				t.Errorf("PagerDuty event of %d bytes > %d", len(pd), pagerDutyMaxEventBytes)
			}
			if !strings.Contains(string(pd), `"ranks":`+strconv.Itoa(100000-culprits)) {
				t.Errorf("PagerDuty event does not count the majority's ranks: %.400s", pd)
			}
			for _, ev := range []Event{EventOpen, EventUpdate, EventResolve} {
				blocks, text := incidentBlocks(inc, ev, testLinks), incidentFallback(inc, ev)
				for _, err := range validateSlackMessage(text, blocks) {
					t.Errorf("Slack %s: %v", ev, err)
				}
				if ev == EventOpen && !strings.Contains(BlocksText(blocks), "on "+plural(100000-culprits, "rank")+", e.g. ") {
					t.Errorf("Slack message does not summarise the ops:\n%s", BlocksText(blocks))
				}
			}
			body, err := json.Marshal(inc)
			if err != nil {
				t.Fatal(err)
			}
			if len(body) > incident.MaxJSONBytes {
				t.Errorf("webhook body %d bytes > %d", len(body), incident.MaxJSONBytes)
			}
			t.Logf("PagerDuty %d KB, webhook %d KB", len(pd)>>10, len(body)>>10)
		})
	}
}

func TestPlural(t *testing.T) {
	for n, want := range map[int]string{0: "0 ranks", 1: "1 rank", 999: "999 ranks", 1000: "1,000 ranks", 99999: "99,999 ranks", 1234567: "1,234,567 ranks"} {
		if got := plural(n, "rank"); got != want {
			t.Errorf("plural(%d) = %q, want %q", n, got, want)
		}
	}
}
