package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/fleetsim"
)

// simulateFleet runs the fleet simulation on an embedded etcd and prints what it measured.
func simulateFleet(ctx context.Context, nodes, jobs int, seed int64, asJSON bool) error {
	quiet := slog.New(slog.DiscardHandler)
	dir, err := os.MkdirTemp("", "ncclwatch-fleetsim-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := etcdembed.Start(ctx, etcdembed.Options{ClientAddr: "127.0.0.1:0", Dir: dir, Logger: quiet})
	if err != nil {
		return err
	}
	defer srv.Close()
	cli, err := etcdconn.New(etcdconn.Config{Endpoints: srv.Endpoints(), Logger: quiet})
	if err != nil {
		return err
	}
	defer cli.Close()
	res, err := fleetsim.Run(ctx, cli, fleetsim.Config{Nodes: nodes, Jobs: jobs, Seed: seed, Drain: true})
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		fmt.Printf("%d jobs on %d of %d nodes over %.0f simulated hours (%.0f job-hours); %d incidents: %d on bad parts, %d background\n",
			res.JobsRun, res.BusyNodes, res.Nodes, res.SimHours, res.JobHours, res.Incidents, res.BadPartRoots, res.NoiseRoots)
		for _, b := range res.BadParts {
			if b.Named {
				fmt.Printf("  %-15s %-26s named after %5.1f h, %d job(s) on its node, a root in %d (%s)\n", b.What, b.Part.Key(),
					b.NamedAfterHours, b.NamedAfterJobs, b.RootedJobs, b.Incident)
			} else {
				fmt.Printf("  %-15s %-26s NOT NAMED (%d job(s) ran on its node, a root in %d)\n", b.What, b.Part.Key(), b.NamedAfterJobs, b.RootedJobs)
			}
		}
		fmt.Printf("node incidents %d, on good parts %d %v; ledger %d keys, %d bytes; %.1f s\n", res.NodeIncidents,
			res.FalseNodeIncidents, res.FalseParts, res.LedgerKeys, res.LedgerBytes, res.WallSeconds)
	}
	var errs []error
	for _, b := range res.BadParts {
		if !b.Named {
			errs = append(errs, fmt.Errorf("the %s (%s) was not named", b.What, b.Part.Key()))
		}
	}
	if res.FalseNodeIncidents > 0 {
		errs = append(errs, fmt.Errorf("%d node incident(s) on good parts", res.FalseNodeIncidents))
	}
	return errors.Join(errs...)
}
