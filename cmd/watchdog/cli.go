package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Exit statuses every command shares; analyze and status add their own (see their --help).
const (
	exitOK    = 0
	exitError = 1 // the command failed while running
	exitUsage = 2 // bad command line: unknown command or flag, a value out of range
)

const exitHelp = `Exit status:
  0  success
  1  failure while running (the message says what)
  2  usage error: unknown command or flag, a value out of range
`

// errHelp reports that --help was asked for and printed: exit 0.
var errHelp = errors.New("help shown")

// usageError is a bad command line: the command exits 2 and points at --help.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// exitCodeError ends a command with its own exit status and message.
type exitCodeError struct {
	code int
	err  error
}

func (e exitCodeError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e exitCodeError) Unwrap() error { return e.err }

// commandFlags is a command's flag set with the conventions of every command: --help prints
// the help with each flag's NCCLWATCH_* twin on stdout and exits 0; a bad flag is a usage
// error (exit 2) named once; flags not given take their environment twin.
type commandFlags struct {
	*flag.FlagSet
	intro string // usage line and description, before the flags
	exits string // the exit status section
}

func newFlags(name, intro string) *commandFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// flag would print the error and the whole help on every mistake: the caller says it once.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &commandFlags{FlagSet: fs, intro: intro, exits: exitHelp}
}

// parse parses args, then the environment twins of the flags not given.
func (f *commandFlags) parse(args []string) error {
	if err := f.Parse(args); err != nil {
		return f.parseError(err)
	}
	if err := applyEnv(f.FlagSet); err != nil {
		return usageError{err}
	}
	return nil
}

// parseError turns flag's error into the command's: help shown, or a usage error.
func (f *commandFlags) parseError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		f.writeHelp(os.Stdout)
		return errHelp
	}
	return usageError{err}
}

// writeHelp prints the intro, every flag with its type, default and environment twin, and
// the exit statuses.
func (f *commandFlags) writeHelp(w io.Writer) {
	fmt.Fprintln(w, strings.TrimRight(f.intro, "\n"))
	fmt.Fprintln(w, "\nFlags (each can also be set by the environment variable shown; the command line wins):")
	f.VisitAll(func(fl *flag.Flag) {
		typ, usage := flag.UnquoteUsage(fl)
		head := "  --" + fl.Name
		if typ != "" {
			head += " " + typ
		}
		fmt.Fprintf(w, "%-44s $%s\n", head, envName(fl.Name))
		if def := defaultText(fl); def != "" {
			usage += " (default " + def + ")"
		}
		fmt.Fprintf(w, "        %s\n", strings.ReplaceAll(usage, "\n", "\n        "))
	})
	fmt.Fprintln(w)
	fmt.Fprint(w, f.exits)
}

// defaultText is a flag's default as help shows it: quoted for strings, nothing for a zero
// value (false, 0, 0s, "").
func defaultText(fl *flag.Flag) string {
	switch fl.DefValue {
	case "", "false", "0", "0s":
		return ""
	}
	if g, ok := fl.Value.(flag.Getter); ok {
		if _, isString := g.Get().(string); isString {
			return strconv.Quote(fl.DefValue)
		}
	}
	return fl.DefValue
}

// Checks of flag values; each returns a usage error naming the flag.

func positiveDuration(name string, d time.Duration) error {
	if d <= 0 {
		return usagef("--%s %s: must be positive", name, d)
	}
	return nil
}

func positiveInt(name string, n int) error {
	if n <= 0 {
		return usagef("--%s %d: must be positive", name, n)
	}
	return nil
}

func notNegative(name string, v float64) error {
	if v < 0 {
		return usagef("--%s %g: must not be negative", name, v)
	}
	return nil
}
