package etcdfence

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/etcdtest"
)

// TestFence: a write carrying a fence applies while the writer's key is at the revision
// it created it at, and is refused, with the fence told, once the key was deleted and
// created again by another writer; a context without a fence writes unconditioned.
func TestFence(t *testing.T) {
	_, cli := etcdtest.Start(t, etcdembed.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	put, err := cli.Put(ctx, "/owner", "a")
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	fenced := With(ctx, Fence{Cmps: []clientv3.Cmp{KeyAt("/owner", put.Header.Revision)}, Refused: func() { refused++ }})
	write := func(ctx context.Context) error {
		resp, err := Txn(ctx, cli).Then(clientv3.OpPut("/data", "x")).Commit()
		if err != nil {
			return err
		}
		return Check(ctx, resp)
	}
	if err := write(fenced); err != nil || refused != 0 {
		t.Fatalf("fence holds: %v, refused %d", err, refused)
	}
	if _, err := cli.Delete(ctx, "/owner"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/owner", "b"); err != nil {
		t.Fatal(err)
	}
	if err := write(fenced); !errors.Is(err, ErrRefused) || refused != 1 {
		t.Fatalf("key recreated: %v, refused %d; want ErrRefused once", err, refused)
	}
	if err := write(context.WithoutCancel(fenced)); !errors.Is(err, ErrRefused) {
		t.Fatalf("WithoutCancel dropped the fence: %v", err)
	}
	if err := write(ctx); err != nil {
		t.Fatalf("no fence: %v", err)
	}
}
