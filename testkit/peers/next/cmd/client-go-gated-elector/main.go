// Command client-go-gated-elector is client-go-elector on client-go 0.38 with KEP-6361's
// leader election recovery on: LeaderElectionConfig.Recovery (no deadline), and the elector's
// write gate (LeaderElector.WriteGate) wrapped around the transport of the client it writes the
// ConfigMap with. The Lease has its own, ungated client, as client-go requires, which
// --lock-kubeconfig may point elsewhere (a test cuts the Lease's traffic alone).
//
// With recovery, failing to renew for the renew deadline closes the gate and calls
// OnStoppedLeading, but neither ends the run nor cancels the context OnStartedLeading was given:
// the write loop goes on, and its writes are refused by the gate ("write failed" lines) until
// the elector renews the Lease it still holds ("started leading" with "resumed": true, same
// term) or sees it taken or deleted, which ends the run; the program then exits, as
// client-go-elector does. SIGTERM or SIGINT cancels the context, so the Lease is released.
//
// It lives in a module of its own (testkit/peers/next) because client-go 0.38 is a
// pre-release while the other peers stay on the release scripts/versions.sh pins; it shares
// their package internal/peer.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"gateway-leader.test/peers/internal/peer"
)

const program = "client-go-gated-elector"

func main() {
	c, err := peer.Parse(program)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := peer.NewLog()
	if err := run(c, log); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

func run(c peer.Config, log *peer.Log) error {
	lockConfig, err := c.LockRESTConfig()
	if err != nil {
		return err
	}
	lockConfig = rest.AddUserAgent(lockConfig, program)
	// As client-go-elector: one hung request must not cost the leadership.
	lockConfig.Timeout = max(c.RenewDeadline/2, time.Second)
	lockClient, err := kubernetes.NewForConfig(lockConfig)
	if err != nil {
		return err
	}
	lease, err := resourcelock.New(resourcelock.LeasesResourceLock, c.Namespace, c.Lease,
		lockClient.CoreV1(), lockClient.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: c.Identity})
	if err != nil {
		return err
	}
	lock := peer.NewObservedLock(lease, log, c, lockClient.CoordinationV1())

	// The writes' client is made once the elector exists: its gate is the elector's.
	var writes kubernetes.Interface
	write := func(ctx context.Context, seq int) (string, error) {
		cm := applycorev1.ConfigMap(c.ConfigMap, c.Namespace).WithData(peer.Data(c.Identity, lock.Term(), seq))
		out, err := writes.CoreV1().ConfigMaps(c.Namespace).Apply(ctx, cm,
			metav1.ApplyOptions{FieldManager: program, Force: true})
		if err != nil {
			return "", err
		}
		return out.ResourceVersion, nil
	}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   c.LeaseDuration,
		RenewDeadline:   c.RenewDeadline,
		RetryPeriod:     c.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            c.Lease,
		Recovery:        &leaderelection.RecoveryConfig{},
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				lock.StartedLeading(ctx, peer.MonoMS())
				peer.WriteWhileLeading(ctx, log, lock, c.ConfigMap, c.WriteEvery, write)
			},
			OnStoppedLeading: lock.StoppedLeading,
		},
	})
	if err != nil {
		return err
	}
	writeConfig, err := c.RESTConfig()
	if err != nil {
		return err
	}
	writeConfig = rest.AddUserAgent(writeConfig, program)
	writeConfig.Wrap(elector.WriteGate())
	if writes, err = kubernetes.NewForConfig(writeConfig); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log.Started(c, program)
	elector.Run(ctx)
	if ctx.Err() != nil {
		log.Exit(0, "signalled")
	}
	// Recovery gave up: the Lease changed hands or was deleted.
	log.Exit(1, "leadership lost")
	return nil
}
