package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/ncclwatch/watchdog/alert"
	"github.com/ncclwatch/watchdog/heartbeat/ibport"
	"github.com/ncclwatch/watchdog/internal/doctor"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
)

const doctorIntro = `usage: watchdog doctor [flags]

Checks a deployment before it matters, and prints one line per finding, each problem with
its fix:
  config  with --config: the detector's YAML file (the one its systemd unit runs) parses
          strictly and its values are in range; its alerts:, etcd and incident keys are
          then checked as below (flags given override the file, as for the detector)
  alerts  the alert configuration (--alerts, else --config's alerts:, else the
          SLACK_*/PAGERDUTY_* environment): valid, and each notifier built with the
          secrets this environment gives
  etcd    every endpoint with the given TLS (which file, which check fails), the user,
          whether etcd's authentication is on
  roles   with --role: what the credentials may do (detector: read every job, write its
          prefix; sidecar: write its node key, and not read the incident key)
  nccl    a training job's NCCL environment (--training-pid, --training-env): debug level,
          subsystems, file pattern against --logs, timestamps; or the profiler plugin:
          found, built for this machine, a profiler plugin
  nvml    the GPUs the sidecar would sample
  ib      the InfiniBand ports the sidecar would sample
Run it where the component runs (a detector pod, a compute node in a job) with its flags.`

const doctorExits = `Exit status:
  0  nothing failed (warnings allowed, unless --strict)
  1  a check failed (with --strict: or warned): the output says what and how to fix it
  2  usage error: unknown flag, a file that cannot be read
`

func runDoctor(ctx context.Context, args []string) error {
	fs := newFlags("doctor", doctorIntro)
	fs.exits = doctorExits
	var ef etcdFlags
	ef.register(fs.FlagSet, "")
	alertsPath := fs.String("alerts", "", "alert routing YAML to check (default: --config's alerts:, else the SLACK_*/PAGERDUTY_* environment)")
	configPath := fs.String("config", "", "the detector's YAML configuration to check (watchdog detector --config): implies --role detector")
	role := fs.String("role", "", "what the etcd credentials are for: detector or sidecar (empty: only reach etcd)")
	job := fs.String("job", defaultJob(), "job a sidecar's node key is written under (--role sidecar)")
	pid := fs.Int("training-pid", 0, "a training process whose NCCL environment to check (/proc/PID/environ)")
	envFile := fs.String("training-env", "", "a file of KEY=VALUE lines (or NUL-separated) with a training job's environment")
	logs := fs.String("logs", "", "the sidecar's --logs globs, compared with NCCL_DEBUG_FILE")
	nvml := fs.Bool("nvml", true, "check NVML")
	ibRoot := fs.String("ib-sysfs", ibport.DefaultIBRoot, "InfiniBand sysfs root")
	netRoot := fs.String("net-sysfs", ibport.DefaultNetRoot, "network interface sysfs root")
	strict := fs.Bool("strict", false, "exit 1 on warnings too")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *role != "" && *role != "detector" && *role != "sidecar" {
		return usagef("--role %q: want detector or sidecar", *role)
	}
	var report doctor.Report

	cfg, source := alert.FromEnv(), "the environment"
	etcdCfg := ef.config()
	if *configPath != "" {
		dc := defaultDetectorConfig()
		err := dc.load(*configPath)
		if err == nil {
			err = dc.validate()
		}
		if err != nil {
			report = append(report, doctor.Result{Check: "config", Level: doctor.Fail, Say: err.Error(),
				Fix: "fix the file: every key, its default and its range are in docs/configuration.md"})
		} else {
			report = append(report, doctor.Result{Check: "config", Level: doctor.OK,
				Say: fmt.Sprintf("%s parses strictly and its values are in range (interval %s, lease_ttl %s, rules.hang_floor %s)",
					*configPath, dc.Interval, dc.LeaseTTL, dc.Rules.HangFloor)})
			if dc.Alerts != nil {
				cfg, source = dc.Alerts, *configPath+" (alerts:)"
			}
			set := given(fs.FlagSet)
			fromFile := etcdconn.Config{Endpoints: dc.EtcdEndpoints, CAFile: dc.EtcdCAFile, CertFile: dc.EtcdCertFile,
				KeyFile: dc.EtcdKeyFile, Username: dc.EtcdUser, PasswordFile: dc.EtcdPasswordFile}
			etcdCfg = mergeEtcd(fromFile, etcdCfg, set)
			if len(dc.EtcdEndpoints) == 0 && !set["etcd-endpoints"] {
				report = append(report, doctor.Result{Check: "etcd", Level: doctor.OK,
					Say: fmt.Sprintf("no etcd_endpoints: the detector runs an embedded etcd on %s (one detector, evaluation only)", dc.EmbeddedEtcdListen)})
			}
			if dc.IncidentKeyFile != "" {
				report = append(report, doctor.IncidentKeys(ctx, dc.IncidentKeyFile)...)
			}
			if *role == "" {
				*role = "detector"
			}
		}
	}
	if *alertsPath != "" {
		c, err := alert.LoadConfig(*alertsPath)
		if err != nil {
			report = append(report, doctor.Result{Check: "alerts", Level: doctor.Fail, Say: err.Error(), Fix: "fix the file (docs/configuration.md#alerts); the detector's whole configuration (detector.yaml, with an alerts: section) is checked with --config"})
		}
		cfg, source = c, *alertsPath
	}
	if cfg != nil {
		report = append(report, doctor.Alerts(cfg, source, alert.BuildOptions{})...)
	}

	if len(etcdCfg.Endpoints) > 0 || *configPath == "" {
		report = append(report, doctor.Etcd(ctx, doctor.EtcdCheck{Config: etcdCfg, Role: *role, Job: *job})...)
	}

	var env map[string]string
	switch {
	case *pid > 0 && *envFile != "":
		return usagef("give --training-pid or --training-env, not both")
	case *pid > 0:
		*envFile = "/proc/" + strconv.Itoa(*pid) + "/environ"
		fallthrough
	case *envFile != "":
		e, err := doctor.ReadEnviron(*envFile)
		if err != nil {
			return usageError{fmt.Errorf("%w (the training process's user, or root, can read it)", err)}
		}
		env = e
	}
	if env != nil {
		report = append(report, doctor.NCCL(doctor.NCCLCheck{Env: env, Source: *envFile, LogGlobs: splitList(*logs)})...)
	} else {
		report = append(report, doctor.Result{Check: "nccl", Level: doctor.Skip, Say: "no --training-pid or --training-env: the NCCL environment not checked"})
	}
	if *nvml {
		report = append(report, doctor.NVML(ctx)...)
	}
	report = append(report, doctor.IB(ctx, *ibRoot, *netRoot)...)

	if err := report.Write(os.Stdout); err != nil {
		return err
	}
	if w := report.Worst(); w == doctor.Fail || (*strict && w == doctor.Warn) {
		return exitCodeError{code: exitError}
	}
	return nil
}

// mergeEtcd is the etcd connection a detector run with these flags and this file uses: each
// flag given overrides the file's value.
func mergeEtcd(file, flags etcdconn.Config, set map[string]bool) etcdconn.Config {
	if set["etcd-endpoints"] {
		file.Endpoints = flags.Endpoints
	}
	if set["etcd-ca-file"] {
		file.CAFile = flags.CAFile
	}
	if set["etcd-cert-file"] {
		file.CertFile = flags.CertFile
	}
	if set["etcd-key-file"] {
		file.KeyFile = flags.KeyFile
	}
	if set["etcd-user"] {
		file.Username = flags.Username
	}
	if set["etcd-password-file"] {
		file.PasswordFile = flags.PasswordFile
	}
	return file
}
