package etcdembed

import (
	"context"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/internal/etcdconn"
)

func TestStartPutGet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := etcdconn.New(etcdconn.Config{Endpoints: s.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	r, err := c.Get(ctx, "/k")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
		t.Fatalf("got %v", r.Kvs)
	}
}
