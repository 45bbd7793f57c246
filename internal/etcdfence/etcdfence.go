// Package etcdfence carries a writer's fence through a context: the etcd comparisons that
// every write made on its behalf must pass, the standard etcd fencing pattern (a write is
// a transaction conditioned on the writer's own lease-bound key still existing at the
// revision it was created at). A detector replica that was frozen or cut off past its
// lease's TTL then cannot overwrite what its successor wrote: its transactions fail.
//
// It travels in the context because the writers are built by factories that know nothing
// of the detector's terms (the alert dispatcher and its delivery store): the detector
// starts each term's dispatcher with a fenced context, and every write the dispatcher makes
// for that term, its last one after the term's context is cancelled included
// (context.WithoutCancel keeps values), carries the fence.
package etcdfence

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrRefused says a fenced write was refused: the writer's key is gone or was created
// again, so another writer may own what it meant to write.
var ErrRefused = errors.New("etcd write refused by its fence: this writer no longer holds its key")

// Fence is what writes made on a writer's behalf must check.
type Fence struct {
	// Cmps must all hold for a write to apply.
	Cmps []clientv3.Cmp
	// Refused is called when a write was refused (may be nil): the writer is stale.
	Refused func()
}

// KeyAt is the comparison that a key still exists at the create revision rev.
func KeyAt(key string, rev int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(key), "=", rev)
}

type ctxKey struct{}

// With returns ctx carrying f.
func With(ctx context.Context, f Fence) context.Context { return context.WithValue(ctx, ctxKey{}, f) }

// From returns the fence ctx carries, if any.
func From(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(ctxKey{}).(Fence)
	return f, ok
}

// Txn starts a transaction conditioned on ctx's fence (none: unconditioned). Check the
// response with Check.
func Txn(ctx context.Context, kv clientv3.KV) clientv3.Txn {
	txn := kv.Txn(ctx)
	if f, ok := From(ctx); ok && len(f.Cmps) > 0 {
		txn = txn.If(f.Cmps...)
	}
	return txn
}

// Check turns a committed transaction started by Txn into ErrRefused when its fence did
// not hold, and tells the fence.
func Check(ctx context.Context, resp *clientv3.TxnResponse) error {
	if resp == nil || resp.Succeeded {
		return nil
	}
	if f, ok := From(ctx); ok && f.Refused != nil {
		f.Refused()
	}
	return ErrRefused
}
