package alert

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/etcdfence"
	"github.com/ncclwatch/watchdog/snapshot"
)

// deliverySchema versions the JSON of a Delivery in etcd.
const deliverySchema = 1

// Delivery is what one notifier has delivered of one incident.
type Delivery struct {
	Schema     int            `json:"schema"`
	Notifier   string         `json:"notifier"`
	IncidentID string         `json:"incident"`
	Job        string         `json:"job,omitempty"`
	Kind       incident.Kind  `json:"kind,omitempty"`
	Revision   int            `json:"revision"`
	State      incident.State `json:"state"`
	// Message is where the notifier posted the incident (Slack channel and ts), if anywhere.
	Message     *MessageRef `json:"message,omitempty"`
	DeliveredAt time.Time   `json:"delivered_at"`
}

// Store keeps delivery state where every detector replica sees it.
type Store interface {
	// Get returns the delivery of an incident to a notifier; found is false when the
	// notifier never delivered it.
	Get(ctx context.Context, notifier, incidentID string) (d Delivery, found bool, err error)
	// List returns every delivery recorded for a notifier.
	List(ctx context.Context, notifier string) ([]Delivery, error)
	// Put records deliveries; a later Put of the same notifier and incident replaces it.
	Put(ctx context.Context, records ...Delivery) error
}

// decide says which event, if any, brings a notifier from what it delivered (prev, nil
// when nothing) to the incident's current state.
func decide(prev *Delivery, inc incident.Incident) (Event, bool) {
	if prev == nil {
		// A resolve of something never announced would only confuse.
		if inc.State == incident.StateResolved {
			return "", false
		}
		return EventOpen, true
	}
	if inc.Revision < prev.Revision || (inc.Revision == prev.Revision && inc.State == prev.State) {
		return "", false // stale or already delivered
	}
	switch {
	case prev.State == incident.StateResolved && inc.State == incident.StateResolved:
		return "", false
	case prev.State == incident.StateResolved:
		return EventOpen, true // reopened under the same id
	case inc.State == incident.StateResolved:
		return EventResolve, true
	default:
		return EventUpdate, true
	}
}

// EtcdStore keeps deliveries in etcd under snapshot.DeliveryKey.
type EtcdStore struct {
	client    *clientv3.Client
	retention time.Duration
}

// EtcdStoreOptions tune an EtcdStore.
type EtcdStoreOptions struct {
	// ResolvedRetention is how long the delivery of a resolved incident is kept (an etcd
	// lease); default 7 days. Open incidents' deliveries are kept until they resolve.
	ResolvedRetention time.Duration
}

// NewEtcdStore returns a Store on an etcd client.
func NewEtcdStore(c *clientv3.Client, opts EtcdStoreOptions) *EtcdStore {
	if opts.ResolvedRetention <= 0 {
		opts.ResolvedRetention = 7 * 24 * time.Hour
	}
	return &EtcdStore{client: c, retention: opts.ResolvedRetention}
}

// Get implements Store.
func (s *EtcdStore) Get(ctx context.Context, notifier, incidentID string) (Delivery, bool, error) {
	resp, err := s.client.Get(ctx, snapshot.DeliveryKey(notifier, incidentID))
	if err != nil {
		return Delivery{}, false, fmt.Errorf("get delivery %s/%s: %w", notifier, incidentID, err)
	}
	if len(resp.Kvs) == 0 {
		return Delivery{}, false, nil
	}
	var d Delivery
	if err := json.Unmarshal(resp.Kvs[0].Value, &d); err != nil {
		return Delivery{}, false, fmt.Errorf("decode delivery %s: %w", resp.Kvs[0].Key, err)
	}
	return d, true, nil
}

// List implements Store.
func (s *EtcdStore) List(ctx context.Context, notifier string) ([]Delivery, error) {
	prefix := snapshot.DeliveryKey(notifier, "")
	resp, err := s.client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list deliveries of %s: %w", notifier, err)
	}
	out := make([]Delivery, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var d Delivery
		if err := json.Unmarshal(kv.Value, &d); err != nil {
			// One unreadable record must not hide the others; it is redelivered at worst.
			continue
		}
		out = append(out, d)
	}
	return out, nil
}

// maxTxnOps stays under etcd's default limit of 128 operations per transaction.
const maxTxnOps = 100

// Put implements Store. Resolved deliveries get a lease, so the keyspace stays bounded.
// When ctx carries a fence (etcdfence.With), every transaction is conditioned on it.
func (s *EtcdStore) Put(ctx context.Context, records ...Delivery) error {
	var lease clientv3.LeaseID
	for start := 0; start < len(records); start += maxTxnOps {
		end := min(start+maxTxnOps, len(records))
		ops := make([]clientv3.Op, 0, end-start)
		for _, d := range records[start:end] {
			d.Schema = deliverySchema
			b, err := json.Marshal(d)
			if err != nil {
				return fmt.Errorf("encode delivery: %w", err)
			}
			var opts []clientv3.OpOption
			if d.State == incident.StateResolved {
				if lease == 0 {
					g, err := s.client.Grant(ctx, int64(s.retention/time.Second))
					if err != nil {
						return fmt.Errorf("grant delivery lease: %w", err)
					}
					lease = g.ID
				}
				opts = append(opts, clientv3.WithLease(lease))
			}
			ops = append(ops, clientv3.OpPut(snapshot.DeliveryKey(d.Notifier, d.IncidentID), string(b), opts...))
		}
		// A detector term's writes carry its fence (internal/etcdfence): a stale replica's
		// delivery state must not overwrite its successor's.
		resp, err := etcdfence.Txn(ctx, s.client).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("put %d deliveries: %w", len(ops), err)
		}
		if err := etcdfence.Check(ctx, resp); err != nil {
			return fmt.Errorf("put %d deliveries: %w", len(ops), err)
		}
	}
	return nil
}
