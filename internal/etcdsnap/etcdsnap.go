// Package etcdsnap reads one node's snapshot from etcd as a one-off (tests, benchmarks,
// tools): its value and the base it is compressed against, at one revision. The detector
// does not use it: it follows every key through its watch.
package etcdsnap

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/snapshot"
)

// ErrNotFound says the node has no snapshot in etcd.
var ErrNotFound = errors.New("no snapshot of the node in etcd")

// ReadNode reads a node's snapshot.
func ReadNode(ctx context.Context, kv clientv3.KV, job, node string) (*snapshot.Node, error) {
	resp, err := kv.Txn(ctx).Then(clientv3.OpGet(snapshot.BaseKey(job, node)), clientv3.OpGet(snapshot.NodeKey(job, node))).Commit()
	if err != nil {
		return nil, fmt.Errorf("read node %s/%s: %w", job, node, err)
	}
	baseKVs, nodeKVs := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	if len(nodeKVs) == 0 {
		return nil, fmt.Errorf("%s/%s: %w", job, node, ErrNotFound)
	}
	var w snapshot.Wire
	var base *snapshot.Base
	if len(baseKVs) > 0 {
		if base, err = w.DecodeBase(baseKVs[0].Value); err != nil {
			return nil, fmt.Errorf("base of %s/%s: %w", job, node, err)
		}
	}
	n, err := w.Decode(nodeKVs[0].Value, base)
	if err != nil {
		return nil, fmt.Errorf("node %s/%s: %w", job, node, err)
	}
	return n, nil
}
