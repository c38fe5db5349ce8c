// Command client-go-elector is a candidate of client-go's own leader election
// (k8s.io/client-go/tools/leaderelection over a Lease, ReleaseOnCancel), set up as
// kube-scheduler and kube-controller-manager set up theirs: while it leads it writes a
// ConfigMap every --write-every on the leadership's context, and it exits once it stops
// leading. SIGTERM or SIGINT cancels the context, so the Lease is released.
//
// gateway-leader's interop test and bench run it beside gateway-leader replicas on one Lease;
// what it prints is described in internal/peer.
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

const program = "client-go-elector"

func main() {
	c, err := peer.Parse(program)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := peer.NewLog()
	config, err := c.RESTConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	config = rest.AddUserAgent(config, program)
	// As controller-runtime sets its lock's client: one hung request must not cost the
	// leadership, so none outlives half the renew deadline.
	config.Timeout = max(c.RenewDeadline/2, time.Second)
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	lease, err := resourcelock.New(resourcelock.LeasesResourceLock, c.Namespace, c.Lease,
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: c.Identity})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	lock := peer.NewObservedLock(lease, log, c, client.CoordinationV1())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	write := func(ctx context.Context, seq int) (string, error) {
		cm := applycorev1.ConfigMap(c.ConfigMap, c.Namespace).WithData(peer.Data(c.Identity, lock.Term(), seq))
		out, err := client.CoreV1().ConfigMaps(c.Namespace).Apply(ctx, cm,
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
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				lock.StartedLeading(ctx, peer.MonoMS())
				peer.WriteWhileLeading(ctx, log, lock, c.ConfigMap, c.WriteEvery, write)
			},
			OnStoppedLeading: lock.StoppedLeading,
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log.Started(c, program)
	elector.Run(ctx)
	if ctx.Err() != nil {
		log.Exit(0, "signalled")
	}
	// As client-go's own example does: a process that lost its leadership ends.
	log.Exit(1, "leadership lost")
}
