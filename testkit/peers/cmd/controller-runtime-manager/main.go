// Command controller-runtime-manager is a controller-runtime Manager with leader election on a
// Lease (LeaderElectionResourceLock "leases", LeaderElectionReleaseOnCancel) and one
// leader-election runnable that writes a ConfigMap every --write-every through the manager's
// client, on the context the manager gives it. The manager stops writing and ends when it loses
// the leadership (controller-runtime's own behaviour: Start returns "leader election lost");
// SIGTERM or SIGINT stops the runnable first, then releases the Lease.
//
// The lock is the one controller-runtime builds for "leases" (client-go's LeaseLock with a client
// whose requests time out at half the renew deadline), given the holder name
// <--identity>_<uuid> instead of <hostname>_<uuid> and wrapped to report its writes
// (internal/peer).
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"gateway-leader.test/peers/internal/peer"
)

const program = "controller-runtime-manager"

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(2)
}

func main() {
	c, err := peer.Parse(program)
	if err != nil {
		fail(err)
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	log := peer.NewLog()
	config, err := c.RESTConfig()
	if err != nil {
		fail(err)
	}
	// As controller-runtime's leaderelection.NewResourceLock builds the lock's client.
	lockConfig := rest.AddUserAgent(rest.CopyConfig(config), "leader-election")
	lockConfig.Timeout = max(c.RenewDeadline/2, time.Second)
	core, err := corev1client.NewForConfig(lockConfig)
	if err != nil {
		fail(err)
	}
	coordination, err := coordinationv1client.NewForConfig(lockConfig)
	if err != nil {
		fail(err)
	}
	lease, err := resourcelock.New(resourcelock.LeasesResourceLock, c.Namespace, c.Lease,
		core, coordination, resourcelock.ResourceLockConfig{Identity: c.Identity})
	if err != nil {
		fail(err)
	}
	lock := peer.NewObservedLock(lease, log, c, coordination)

	mgr, err := ctrl.NewManager(config, ctrl.Options{
		LeaderElection:                      true,
		LeaderElectionResourceLock:          resourcelock.LeasesResourceLock,
		LeaderElectionNamespace:             c.Namespace,
		LeaderElectionID:                    c.Lease,
		LeaderElectionReleaseOnCancel:       true,
		LeaderElectionResourceLockInterface: lock,
		LeaseDuration:                       &c.LeaseDuration,
		RenewDeadline:                       &c.RenewDeadline,
		RetryPeriod:                         &c.RetryPeriod,
		// Several managers share the machine: no listener.
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		fail(err)
	}
	writer := mgr.GetClient()
	write := func(ctx context.Context, seq int) (string, error) {
		cm := applycorev1.ConfigMap(c.ConfigMap, c.Namespace).WithData(peer.Data(c.Identity, lock.Term(), seq))
		if err := writer.Apply(ctx, cm, client.FieldOwner(program), client.ForceOwnership); err != nil {
			return "", err
		}
		if cm.ResourceVersion == nil {
			return "", fmt.Errorf("the apply's answer has no resourceVersion")
		}
		return *cm.ResourceVersion, nil
	}
	// A runnable that does not say otherwise runs only while the manager leads.
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		lock.StartedLeading(ctx, peer.MonoMS())
		defer lock.StoppedLeading()
		peer.WriteWhileLeading(ctx, log, lock, c.ConfigMap, c.WriteEvery, write)
		return nil
	}))
	if err != nil {
		fail(err)
	}
	log.Started(c, program)
	err = mgr.Start(ctrl.SetupSignalHandler())
	lock.StoppedLeading()
	if err != nil {
		log.Exit(1, err.Error())
	}
	log.Exit(0, "signalled")
}
