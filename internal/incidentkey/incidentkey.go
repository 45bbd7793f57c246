// Package incidentkey gives the detectors the key that seals their incidents
// (incident/seal) when no key file is configured: one random key created once in etcd, at
// EtcdKey, under the prefix only the detector's role may read (internal/etcdroles). With
// roles in place a sidecar's credential can neither read it nor forge a sealed incident;
// a site that shares one etcd credential gives the detectors a key file instead
// (--incident-key-file, docs/security.md).
package incidentkey

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/incident/seal"
	"github.com/ncclwatch/watchdog/snapshot"
)

// EtcdKey is where the key is kept.
const EtcdKey = snapshot.Prefix + "detector/incident-key"

// Etcd returns the key kept at EtcdKey, creating it if no detector did yet (one
// transaction: two detectors starting at once agree on the first one's key).
func Etcd(cli *clientv3.Client) seal.Keys {
	return func(ctx context.Context) ([][]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		raw := make([]byte, 48)
		if _, err := rand.Read(raw); err != nil {
			return nil, fmt.Errorf("incident key: %w", err)
		}
		fresh := base64.RawStdEncoding.EncodeToString(raw)
		resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(EtcdKey), "=", 0)).
			Then(clientv3.OpPut(EtcdKey, fresh)).Else(clientv3.OpGet(EtcdKey)).Commit()
		if err != nil {
			return nil, fmt.Errorf("incident key %s: %w", EtcdKey, err)
		}
		if resp.Succeeded {
			return [][]byte{[]byte(fresh)}, nil
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return nil, fmt.Errorf("incident key %s: vanished between compare and read", EtcdKey)
		}
		return [][]byte{kvs[0].Value}, nil
	}
}
