package gpu

import (
	"fmt"
	"math/bits"
)

// Clock-event reason bits of nvmlDeviceGetCurrentClocksEventReasons (the same bits as the
// older throttle-reasons call).
const (
	ReasonGpuIdle                   uint64 = 0x1
	ReasonApplicationsClocksSetting uint64 = 0x2
	ReasonSwPowerCap                uint64 = 0x4
	ReasonHwSlowdown                uint64 = 0x8
	ReasonSyncBoost                 uint64 = 0x10
	ReasonSwThermalSlowdown         uint64 = 0x20
	ReasonHwThermalSlowdown         uint64 = 0x40
	ReasonHwPowerBrakeSlowdown      uint64 = 0x80
	ReasonDisplayClockSetting       uint64 = 0x100
)

// Reasons names the bits set in a clock-event reason mask, lowest bit first; a bit NVML
// may add later is named by its value, e.g. "0x200".
func Reasons(mask uint64) []string {
	if mask == 0 {
		return nil
	}
	names := [...]string{ // indexed by bit position
		"GpuIdle",
		"ApplicationsClocksSetting",
		"SwPowerCap",
		"HwSlowdown",
		"SyncBoost",
		"SwThermalSlowdown",
		"HwThermalSlowdown",
		"HwPowerBrakeSlowdown",
		"DisplayClockSetting",
	}
	out := make([]string, 0, bits.OnesCount64(mask))
	for m := mask; m != 0; m &= m - 1 {
		bit := bits.TrailingZeros64(m)
		if bit < len(names) {
			out = append(out, names[bit])
		} else {
			out = append(out, fmt.Sprintf("%#x", uint64(1)<<bit))
		}
	}
	return out
}
