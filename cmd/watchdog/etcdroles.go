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

const etcdRolesIntro = `usage: watchdog etcd-roles (--print | --apply) [flags]

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
root user (password <--password-dir>/root) and turns etcd's authentication on.`

func runEtcdRoles(ctx context.Context, args []string) error {
	fs := newFlags("etcd-roles", etcdRolesIntro)
	var ef etcdFlags
	ef.register(fs.FlagSet, "")
	printScript := fs.Bool("print", false, "print the etcdctl commands")
	apply := fs.Bool("apply", false, "create the roles and users through etcd")
	jobs := fs.String("jobs", "", "comma-separated jobs, one sidecar role each (default: one sidecar role for every job)")
	pwDir := fs.String("password-dir", "", "folder of the users' password files (required with --apply; --print names it in the script, default /etc/ncclwatch/etcd-passwords)")
	enableAuth := fs.Bool("enable-auth", false, "with --apply: add the root user and turn authentication on")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *printScript == *apply {
		return usagef("give one of --print and --apply")
	}
	plan, err := etcdroles.NewPlan(splitList(*jobs))
	if err != nil {
		return usageError{err}
	}
	if *printScript {
		if *enableAuth {
			return usagef("--enable-auth goes with --apply (the script ends with the commands, commented)")
		}
		dir := *pwDir
		if dir == "" {
			dir = "/etc/ncclwatch/etcd-passwords"
		}
		_, err := io.WriteString(os.Stdout, plan.Script(dir))
		return err
	}
	if *pwDir == "" {
		return usagef("--apply needs --password-dir")
	}
	if len(splitList(ef.endpoints)) == 0 {
		return usagef("--apply needs --etcd-endpoints")
	}
	users := []string{}
	for _, r := range plan.Roles {
		users = append(users, r.Name)
	}
	if *enableAuth {
		users = append(users, "root")
	}
	passwords, created, err := passwordFiles(*pwDir, users)
	if err != nil {
		return err
	}
	cli, err := etcdconn.New(ef.config())
	if err != nil {
		return err
	}
	defer cli.Close()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
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
