package logparse

import "strconv"

// Gap tells the tracker that lines are missing before the next one: a hole where the
// sidecar's log bound freed what it had read, or NULs a copytruncate left. The positions it
// counts from here on are no longer those the other ranks count (the k-th collective after
// the gap is not the k-th of the communicator), and comparing them would report ranks
// behind or mismatched that are not. So every communicator seen so far takes an identity
// of this process alone, which no reader joins with another rank's ("unjoined:...", with a
// "/" so that analyze does not infer a join either); communicators initialised after the
// gap count from their start and join as usual.
func (t *Tracker) Gap() {
	for _, c := range t.all {
		c.ID = "unjoined:" + t.Host + ":" + strconv.Itoa(t.PID) + ":0x" + strconv.FormatUint(c.Ptr, 16) + "/gap"
	}
	t.lastComms = [2]*Comm{}
}
