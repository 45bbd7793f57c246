// Package knowledge holds what the detector knows as data, in two tables read once and
// checked by tests: what a message of NCCL, its network plugins, CUDA, the HCA or PyTorch
// means (messages.csv, read by ReadMessages), and which finding explains which
// (explains.csv, read by ReadExplains). Package detect applies both; a bad row is left out
// and reported, never a crash.
package knowledge

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Role is the part a finding plays in the explains table: the findings of one role are
// explained, and explain others, alike.
type Role string

// The roles, in the order the findings are kept: the explains table iterates its targets,
// and a source it searches for, in this order.
const (
	RoleCrash     Role = "crash"     // a process that went away
	RoleMismatch  Role = "mismatch"  // ranks that called different collectives
	RoleInversion Role = "inversion" // ranks that called two communicators' collectives in another order
	RoleStall     Role = "stall"     // a process that stopped (hangs, point-to-point mismatches)
	RoleStuck     Role = "stuck"     // a collective every rank entered and none finished
	RoleLink      Role = "link"      // a link fault
	RoleCause     Role = "cause"     // an error that explains the deaths and stalls after it
	RoleRAS       Role = "ras"       // NCCL RAS's view, until it is judged against the logs
	RoleFallback  Role = "fallback"  // an NCCL error reported only when nothing critical is found
	RoleNote      Role = "note"      // explains nothing else (GPU, straggler, lost node, monitoring)
)

// Roles lists every role in the order the findings are kept.
var Roles = []Role{RoleCrash, RoleMismatch, RoleInversion, RoleStall, RoleStuck, RoleLink, RoleCause, RoleRAS,
	RoleFallback, RoleNote}

// Origin tells a finding from others of its role where the explains table must.
type Origin string

const (
	Witness    Origin = "witness"     // what one process saw of another's failure, not its own word
	SilentInit Origin = "silent-init" // an init that failed without a WARN: it may echo another's error
	NetSize    Origin = "net-size"    // two ends disagree on a message's size
	InitHang   Origin = "init-hang"   // a communicator whose init never completed
	Versions   Origin = "versions"    // the ranks load different NCCL versions
	NIC        Origin = "nic"         // slow links that share one end: that end's NIC or host
)

// Origins lists every origin.
var Origins = []Origin{Witness, SilentInit, NetSize, InitHang, Versions, NIC}

// readTable reads a table: comment lines start with '#', the header must be header, and
// each record goes to row; the fault of every bad one is returned with its line, and the
// rest are read.
func readTable(r io.Reader, name string, header []string, row func([]string) error) error {
	cr := csv.NewReader(r)
	cr.Comment, cr.FieldsPerRecord = '#', -1
	got, err := cr.Read()
	if err != nil {
		return fmt.Errorf("%s table: header: %w", name, err)
	}
	if !slices.Equal(got, header) {
		return fmt.Errorf("%s table: header is %q, want %q", name, got, header)
	}
	var errs []error
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("%s table: %w", name, err))...)
		}
		if err := row(rec); err != nil {
			errs = append(errs, fmt.Errorf("%s table line %d (%s): %w", name, line, rec[0], err))
		}
	}
	return errors.Join(errs...)
}
