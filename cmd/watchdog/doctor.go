package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/ncclwatch/watchdog/alert"
	"github.com/ncclwatch/watchdog/heartbeat/ibport"
	"github.com/ncclwatch/watchdog/internal/doctor"
)

const doctorIntro = `usage: watchdog doctor [flags]

Checks a deployment before it matters, and prints one line per finding, each problem with
its fix:
  alerts  the alert configuration (--alerts, else the SLACK_*/PAGERDUTY_* environment):
          valid, and each notifier built with the secrets this environment gives
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
	alertsPath := fs.String("alerts", "", "alert routing YAML to check (default: the SLACK_*/PAGERDUTY_* environment)")
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
	if *alertsPath != "" {
		c, err := alert.LoadConfig(*alertsPath)
		if err != nil {
			report = append(report, doctor.Result{Check: "alerts", Level: doctor.Fail, Say: err.Error(), Fix: "fix the file (docs/configuration.md#alerts)"})
		}
		cfg, source = c, *alertsPath
	}
	if cfg != nil {
		report = append(report, doctor.Alerts(cfg, source, alert.BuildOptions{})...)
	}

	report = append(report, doctor.Etcd(ctx, doctor.EtcdCheck{Config: ef.config(), Role: *role, Job: *job})...)

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
