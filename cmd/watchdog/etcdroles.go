package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdroles"
)

const etcdRolesIntro = `usage: watchdog etcd-roles (--print | --apply | --remove | --write-password FILE) [flags]

Sets up the watchdog's least-privilege etcd users and roles (docs/security.md):
  ncclwatch-detector          readwrite /ncclwatch/v1/ (node keys; under detector/:
                              incidents, delivery state, the election, the incident key)
  ncclwatch-sidecar           write /ncclwatch/v1/jobs/ (node keys and bases, any job)
  ncclwatch-sidecar-<job>     with --jobs: write only /ncclwatch/v1/jobs/<job>/nodes/ and
                              /ncclwatch/v1/jobs/<job>/base/ (node keys and their bases)
Each user has the role of its name; its password is the file <--password-dir>/<user>.

--print writes the etcdctl commands as a shell script (review it, run it as etcd's root).
--apply makes them through the --etcd-* connection (as root: --etcd-user root), creating a
random password file (mode 0600) for each user that has none; --enable-auth then adds the
root user (password <--password-dir>/root) and turns etcd's authentication on.

Per job (a Slurm prolog, the Helm chart's hook): --apply --jobs-only --jobs <job> creates
only that job's role and user and sets its password, which comes from
--job-password-key (derived from a site key: the nodes write it with --write-password),
from <--password-dir>/ncclwatch-sidecar-<job>, or, with --certificate-only, is random and
kept nowhere (the job's sidecars log in by a client certificate whose CN is the user).
--remove --jobs <job> deletes the job's role and user when the job ends.
--write-password FILE --jobs <job> --job-password-key KEY writes the job's password
(mode 0600) and asks etcd nothing.`

func runEtcdRoles(ctx context.Context, args []string) error {
	fs := newFlags("etcd-roles", etcdRolesIntro)
	var ef etcdFlags
	ef.register(fs.FlagSet, "")
	printScript := fs.Bool("print", false, "print the etcdctl commands")
	apply := fs.Bool("apply", false, "create the roles and users through etcd")
	remove := fs.Bool("remove", false, "delete the per-job roles and users of --jobs through etcd")
	writePassword := fs.String("write-password", "", "write the password of the one job of --jobs, derived from --job-password-key, to this file")
	jobs := fs.String("jobs", "", "comma-separated jobs, one sidecar role each (default: one sidecar role for every job)")
	jobsOnly := fs.Bool("jobs-only", false, "with --apply: only the per-job roles of --jobs (not the detector's)")
	jobKey := fs.String("job-password-key", "", "file of the site key the per-job users' passwords derive from (at least 32 bytes)")
	certOnly := fs.Bool("certificate-only", false, "with --jobs-only: the per-job users log in by their client certificate alone; their passwords are random and kept nowhere")
	pwDir := fs.String("password-dir", "", "folder of the users' password files (required with --apply; --print names it in the script, default /etc/ncclwatch/etcd-passwords)")
	enableAuth := fs.Bool("enable-auth", false, "with --apply: add the root user and turn authentication on")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	modes := 0
	for _, on := range []bool{*printScript, *apply, *remove, *writePassword != ""} {
		if on {
			modes++
		}
	}
	if modes != 1 {
		return usagef("give one of --print, --apply, --remove and --write-password")
	}
	jobList := splitList(*jobs)
	if (*jobsOnly || *remove || *writePassword != "") && len(jobList) == 0 {
		return usagef("--jobs-only, --remove and --write-password need --jobs")
	}
	if (*certOnly || *jobKey != "") && !(*jobsOnly || *writePassword != "") {
		return usagef("--certificate-only and --job-password-key go with --jobs-only (or --write-password)")
	}
	if *certOnly && *jobKey != "" {
		return usagef("give one of --certificate-only and --job-password-key")
	}
	plan, err := etcdroles.NewPlan(jobList)
	if *jobsOnly || *remove || *writePassword != "" {
		plan, err = etcdroles.JobPlan(jobList)
	}
	if err != nil {
		return usageError{err}
	}
	if *printScript {
		if *enableAuth || *jobsOnly {
			return usagef("--enable-auth and --jobs-only go with --apply (the script ends with the commands, commented)")
		}
		dir := *pwDir
		if dir == "" {
			dir = "/etc/ncclwatch/etcd-passwords"
		}
		_, err := io.WriteString(os.Stdout, plan.Script(dir))
		return err
	}
	var key []byte
	if *jobKey != "" {
		if key, err = readJobKey(*jobKey); err != nil {
			return err
		}
	}
	if *writePassword != "" {
		if len(jobList) != 1 || key == nil {
			return usagef("--write-password needs one job in --jobs and --job-password-key")
		}
		return writeFileAtomic(*writePassword, []byte(etcdroles.JobPassword(key, jobList[0])+"\n"), 0o600)
	}
	if len(splitList(ef.endpoints)) == 0 {
		return usagef("--apply and --remove need --etcd-endpoints")
	}
	var passwords map[string]string
	var created []string
	switch {
	case *remove:
	case key != nil || *certOnly:
		passwords = map[string]string{}
		for i, r := range plan.Roles {
			if key != nil {
				passwords[r.Name] = etcdroles.JobPassword(key, jobList[i])
			} else if passwords[r.Name], err = etcdroles.RandomPassword(); err != nil {
				return err
			}
		}
	default:
		if *pwDir == "" {
			return usagef("--apply needs --password-dir (or, with --jobs-only, --job-password-key or --certificate-only)")
		}
		users := []string{}
		for _, r := range plan.Roles {
			users = append(users, r.Name)
		}
		if *enableAuth {
			users = append(users, "root")
		}
		if passwords, created, err = passwordFiles(*pwDir, users); err != nil {
			return err
		}
	}
	cli, err := etcdconn.New(ef.config())
	if err != nil {
		return err
	}
	defer cli.Close()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if *remove {
		if err := plan.Remove(actx, cli); err != nil {
			return fmt.Errorf("remove: %w (explained: %v)", err, etcdconn.Explain(actx, ef.config()))
		}
		for _, r := range plan.Roles {
			fmt.Printf("role and user %s removed\n", r.Name)
		}
		return nil
	}
	if err := plan.Apply(actx, cli, passwords); err != nil {
		return fmt.Errorf("apply: %w (explained: %v)", err, etcdconn.Explain(actx, ef.config()))
	}
	for _, r := range plan.Roles {
		fmt.Printf("role and user %s: %s\n", r.Name, r.Why)
	}
	if len(created) > 0 {
		fmt.Printf("new password files (mode 0600): %s\n", strings.Join(created, " "))
	}
	if *enableAuth {
		if err := etcdroles.EnableAuth(actx, cli, passwords["root"]); err != nil {
			return err
		}
		fmt.Println("authentication enabled: from now on every client needs a user (--etcd-user, --etcd-password-file)")
	}
	return nil
}

// readJobKey reads the site key per-job passwords derive from: at least 32 bytes, so that
// a password cannot be guessed from the job's name.
func readJobKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--job-password-key: %w", err)
	}
	b = []byte(strings.TrimSpace(string(b)))
	if len(b) < 32 {
		return nil, fmt.Errorf("--job-password-key %s: %d bytes, want at least 32 (openssl rand -base64 48)", path, len(b))
	}
	return b, nil
}

// writeFileAtomic writes data to path through a temporary file in its folder, so that a
// reader never sees half a password.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// passwordFiles reads each user's password from dir/<user>, creating a random one (mode
// 0600) where there is none; it returns the passwords and the files it created.
func passwordFiles(dir string, users []string) (map[string]string, []string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("--password-dir: %w", err)
	}
	out := map[string]string{}
	var created []string
	for _, u := range users {
		path := filepath.Join(dir, u)
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			pw := strings.TrimSpace(string(b))
			if pw == "" {
				return nil, nil, fmt.Errorf("password file %s is empty", path)
			}
			out[u] = pw
		case errors.Is(err, os.ErrNotExist):
			raw := make([]byte, 24)
			if _, err := rand.Read(raw); err != nil {
				return nil, nil, err
			}
			pw := base64.RawURLEncoding.EncodeToString(raw)
			if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
				return nil, nil, fmt.Errorf("password file: %w", err)
			}
			out[u] = pw
			created = append(created, path)
		default:
			return nil, nil, fmt.Errorf("password file: %w", err)
		}
	}
	return out, created, nil
}
