package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/ncclwatch/watchdog/internal/etcdconn"
)

// envName is the environment variable that sets a flag's default: NCCLWATCH_ETCD_ENDPOINTS.
func envName(flagName string) string {
	return "NCCLWATCH_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// applyEnv sets every flag not given on the command line from its NCCLWATCH_* variable.
func applyEnv(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %w", envName(f.Name), v, e)
			}
		}
	})
	return err
}

// given reports which flags were set on the command line or by environment.
func given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := os.LookupEnv(envName(f.Name)); ok {
			set[f.Name] = true
		}
	})
	return set
}

// etcdFlags are the connection flags shared by sidecar, detector and status.
type etcdFlags struct {
	endpoints, ca, cert, key, user, passwordFile string
}

func (e *etcdFlags) register(fs *flag.FlagSet, defaultEndpoints string) {
	fs.StringVar(&e.endpoints, "etcd-endpoints", defaultEndpoints, "comma-separated etcd endpoints")
	fs.StringVar(&e.ca, "etcd-ca-file", "", "CA certificate file for etcd TLS")
	fs.StringVar(&e.cert, "etcd-cert-file", "", "client certificate file for etcd TLS")
	fs.StringVar(&e.key, "etcd-key-file", "", "client key file for etcd TLS")
	fs.StringVar(&e.user, "etcd-user", "", "etcd user (its password comes from --etcd-password-file)")
	fs.StringVar(&e.passwordFile, "etcd-password-file", "", "file holding the etcd password")
}

func (e *etcdFlags) config() etcdconn.Config {
	return etcdconn.Config{Endpoints: splitList(e.endpoints), CAFile: e.ca, CertFile: e.cert, KeyFile: e.key,
		Username: e.user, PasswordFile: e.passwordFile}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// logFlags choose the log format; JSON is for production.
type logFlags struct{ format, level string }

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "json", "log format: json or text")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn, error")
}

func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(l.level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	o := &slog.HandlerOptions{Level: lvl, ReplaceAttr: durationText}
	switch l.format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json or text", l.format)
}

// durationText writes durations as Go durations ("1.5s"): slog's JSON handler would write
// them as integer nanoseconds, which nobody reads as a retry delay.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
