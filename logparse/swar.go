package logparse

import (
	"encoding/binary"
	"math/bits"
)

// Word-at-a-time helpers for the hot path (SWAR: SIMD within a register). A log line is
// mostly numbers; reading them eight bytes per load instead of one byte per iteration is
// what lets the parser keep up with grep. Every helper takes a word loaded little-endian,
// so byte k of the word is b[i+k], and reports in bit 8k+7 of a mask.

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
	lows7 = 0x7f7f7f7f7f7f7f7f
	nib   = 0x0f0f0f0f0f0f0f0f
)

// load8 reads b[i:i+8]; the caller has checked i+8 <= len(b).
func load8(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[i : i+8]) }

// nonZeroBytes sets the high bit of each byte of v that is not zero, exactly (no carry
// crosses a byte: (v&0x7f)+0x7f <= 0xfe).
func nonZeroBytes(v uint64) uint64 { return (v | ((v & lows7) + lows7)) & highs }

// byteMask sets the high bit of each byte of x equal to c.
func byteMask(x uint64, c byte) uint64 { return ^nonZeroBytes(x^(ones*uint64(c))) & highs }

// nonDigits sets the high bit of each byte of x that is not '0'..'9'.
func nonDigits(x uint64) uint64 {
	// High nibble 3, and low nibble + 6 stays below 16.
	return nonZeroBytes((x & ^uint64(nib) ^ 0x3030303030303030) | (((x & nib) + 0x0606060606060606) & ^uint64(nib)))
}

// nonHexDigits sets the high bit of each byte of x that is not 0-9, a-f or A-F.
func nonHexDigits(x uint64) uint64 {
	lo := x & nib
	// A letter: 0x4_ or 0x6_ with a low nibble of 1..6.
	notLetter := (x&0xd0d0d0d0d0d0d0d0 ^ 0x4040404040404040) |
		((lo + 0x0909090909090909) & ^uint64(nib)) |
		(((lo + nib) & ^uint64(nib)) ^ 0x1010101010101010)
	return nonDigits(x) & nonZeroBytes(notLetter)
}

// firstMarked is the index of the first byte whose high bit is set in mask, 8 when none.
func firstMarked(mask uint64) int { return bits.TrailingZeros64(mask) >> 3 }

// firstSpace is the index of the first space in the 16 bytes of x then y, 16 when none.
func firstSpace(x, y uint64) int {
	const spaces = 0x2020202020202020
	if m := ^nonZeroBytes(x^spaces) & highs; m != 0 {
		return firstMarked(m)
	}
	return 8 + firstMarked(^nonZeroBytes(y^spaces)&highs)
}

// decimal8 is the value of the n (1..8) decimal digits at the start of x.
func decimal8(x uint64, n int) uint64 {
	// Move the digits to the top bytes: the bytes shifted in are leading zeros. Then
	// combine neighbours: pairs, quads, the eight.
	x = (x & nib) << (64 - 8*n)
	x = x * (10<<8 + 1) >> 8
	x = (x & 0x00ff00ff00ff00ff) * (100<<16 + 1) >> 16
	return (x & 0x0000ffff0000ffff) * (10000<<32 + 1) >> 32
}

// hex8 is the value of the n (1..8) hex digits at the start of x.
func hex8(x uint64, n int) uint64 {
	// A digit's low nibble is its value; a letter's is its value - 9 (bit 6 set).
	x = (x & nib) + (x>>6&ones)*9
	x <<= 64 - 8*n
	x = (x&0x000f000f000f000f)<<4 | (x&0x0f000f000f000f00)>>8
	x = (x&0x000000ff000000ff)<<8 | (x&0x00ff000000ff0000)>>16
	return (x&0xffff)<<16 | (x>>32)&0xffff
}

// swarDec reads up to 19 decimal digits at b[i:]: the value, the index after the last digit
// and how many digits there were (more than 19 is reported as 20, the value then undefined).
func swarDec(b []byte, i int) (v uint64, end, n int) {
	start := i
	for i+8 <= len(b) {
		x := load8(b, i)
		k := firstMarked(nonDigits(x))
		if k > 0 {
			v = v*pow10[k] + decimal8(x, k)
			i += k
		}
		if k < 8 || i-start > 16 {
			return v, i, min(i-start, 20)
		}
	}
	for i < len(b) && i-start < 20 {
		d := b[i] - '0'
		if d > 9 {
			break
		}
		v = v*10 + uint64(d)
		i++
	}
	return v, i, i - start
}

// swarHex reads up to 16 hex digits at b[i:]: the value, the index after them and how many
// there were (more than 16 is reported as 17, the value then undefined).
func swarHex(b []byte, i int) (v uint64, end, n int) {
	start := i
	for i+8 <= len(b) {
		x := load8(b, i)
		k := firstMarked(nonHexDigits(x))
		if k > 0 {
			v = v<<(4*k) | hex8(x, k)
			i += k
		}
		if k < 8 || i-start > 16 {
			return v, i, min(i-start, 17)
		}
	}
	for i < len(b) && i-start < 17 {
		c := b[i]
		d := c - '0'
		if d > 9 {
			d = (c | 0x20) - 'a'
			if d > 5 {
				break
			}
			d += 10
		}
		v = v<<4 | uint64(d)
		i++
	}
	return v, i, i - start
}

var pow10 = [...]uint64{1, 10, 100, 1000, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9}

// indexByte16 is the index of the first c in b[i:i+16], or -1; when fewer than 16 bytes
// remain it searches what is there.
func indexByte16(b []byte, i int, c byte) int {
	if i+16 <= len(b) {
		if m := byteMask(load8(b, i), c); m != 0 {
			return firstMarked(m)
		}
		if m := byteMask(load8(b, i+8), c); m != 0 {
			return 8 + firstMarked(m)
		}
		return -1
	}
	for k := i; k < len(b) && k < i+16; k++ {
		if b[k] == c {
			return k - i
		}
	}
	return -1
}

// equalAt reports whether b[i:i+n] equals want[:n] for n <= len(want) and i+n <= len(b),
// eight bytes per comparison (overlapping at the end).
func equalAt(b []byte, i int, want []byte, n int) bool {
	switch {
	case n < 8:
		return string(b[i:i+n]) == string(want[:n])
	case n <= 16:
		return load8(b, i) == load8(want, 0) && load8(b, i+n-8) == load8(want, n-8)
	case n <= 32:
		return load8(b, i) == load8(want, 0) && load8(b, i+8) == load8(want, 8) &&
			load8(b, i+n-16) == load8(want, n-16) && load8(b, i+n-8) == load8(want, n-8)
	}
	k := 0
	for ; k+8 <= n; k += 8 {
		if load8(b, i+k) != load8(want, k) {
			return false
		}
	}
	return k == n || load8(b, i+n-8) == load8(want, n-8)
}
