// Package peer is what the Go peers share: their flags, their JSON lines and the monotonic
// clock those lines are stamped with, a resourcelock.Interface that reports every write of the
// Lease, and the loop that writes while leading.
//
// Every line goes to stdout as one JSON object with "event" and "mono_ms" (CLOCK_MONOTONIC in
// milliseconds, the clock gateway-leader's replicas stamp their own lines with, so that the
// bench compares instants across processes). The events:
//
//	started          the process is up (identity, timings)
//	following        not leading; the Lease as last read names holder under term (each change)
//	acquired         our write that made us the holder (before the elector calls back)
//	started leading  the elector called back; term = leaseTransitions read from the server
//	                 right after, valid_until_mono_ms = that write's sending + renew deadline;
//	                 "resumed": true when a recovering elector (client-go 0.38's
//	                 LeaderElectionConfig.Recovery) renewed the Lease it still held, same term
//	renewed          a renewal was written: valid_until_mono_ms moved
//	wrote            one write of the leadership, with the object's resulting resourceVersion
//	write failed     a write was refused or timed out
//	released         the release (empty holder) was written
//	stopped leading  the leadership ended as the program sees it
//	exit             the process ends (code)
package peer

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Config is what the programs take on their command line.
type Config struct {
	Kubeconfig    string
	Namespace     string
	Lease         string
	Identity      string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	ConfigMap     string
	WriteEvery    time.Duration
	// ContentType is the encoding of the requests' bodies, as rest.Config.ContentType takes it
	// (empty: client-go's default, JSON). "application/cbor" needs client-go's feature gate
	// too: KUBE_FEATURE_ClientsAllowCBOR=true in the environment.
	ContentType string
	// LockKubeconfig is the kubeconfig of the Lease's client, when it is not Kubeconfig's (a
	// test cuts the Lease's traffic alone through a partition proxy). Only
	// client-go-gated-elector reads it.
	LockKubeconfig string
}

// Parse reads the flags. The holder identity is <name>_<uuid>, as controller-runtime names its
// own (hostname_uuid), so that a restarted process never renews its predecessor's Lease.
func Parse(program string) (Config, error) {
	var c Config
	var name string
	fs := flag.NewFlagSet(program, flag.ContinueOnError)
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (required)")
	fs.StringVar(&c.LockKubeconfig, "lock-kubeconfig", "", "kubeconfig of the Lease's client (default: --kubeconfig)")
	fs.StringVar(&c.Namespace, "namespace", "default", "namespace of the Lease and of the ConfigMap written")
	fs.StringVar(&c.Lease, "lease", "", "name of the Lease (required)")
	fs.StringVar(&name, "identity", program, "name of this candidate; the holder is <name>_<uuid>")
	fs.DurationVar(&c.LeaseDuration, "lease-duration", 15*time.Second, "LeaseDuration")
	fs.DurationVar(&c.RenewDeadline, "renew-deadline", 10*time.Second, "RenewDeadline")
	fs.DurationVar(&c.RetryPeriod, "retry-period", 2*time.Second, "RetryPeriod")
	fs.StringVar(&c.ConfigMap, "write-configmap", "", "ConfigMap whose data the leader writes (required)")
	fs.DurationVar(&c.WriteEvery, "write-every", 100*time.Millisecond, "interval between two writes while leading")
	fs.StringVar(&c.ContentType, "content-type", "", "encoding client-go sends: application/json (default), application/vnd.kubernetes.protobuf or application/cbor")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return c, err
	}
	if c.Kubeconfig == "" || c.Lease == "" || c.ConfigMap == "" || name == "" {
		return c, errors.New("--kubeconfig, --lease, --write-configmap and --identity must not be empty")
	}
	if c.WriteEvery <= 0 {
		return c, errors.New("--write-every must be positive")
	}
	c.Identity = name + "_" + string(uuid.NewUUID())
	return c, nil
}

// RESTConfig is the kubeconfig's client configuration.
func (c Config) RESTConfig() (*rest.Config, error) {
	config, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	if c.ContentType != "" {
		config.ContentType = c.ContentType
	}
	return config, nil
}

// LockRESTConfig is the client configuration of the Lease's client: LockKubeconfig's, else
// RESTConfig.
func (c Config) LockRESTConfig() (*rest.Config, error) {
	if c.LockKubeconfig == "" {
		return c.RESTConfig()
	}
	return Config{Kubeconfig: c.LockKubeconfig, ContentType: c.ContentType}.RESTConfig()
}

// MonoMS is CLOCK_MONOTONIC in milliseconds (microsecond resolution).
func MonoMS() float64 {
	var ts unix.Timespec
	// CLOCK_MONOTONIC cannot fail on Linux.
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return float64(ts.Sec)*1e3 + float64(ts.Nsec/1e3)/1e3
}

// Log prints the JSON lines; safe for concurrent use.
type Log struct {
	mu  sync.Mutex
	enc *json.Encoder
}

// NewLog prints to stdout.
func NewLog() *Log {
	return &Log{enc: json.NewEncoder(os.Stdout)}
}

// Event prints one line: the event, the instant `at` (MonoMS, taken when it happened) and
// fields.
func (l *Log) Event(at float64, event string, fields map[string]any) {
	line := map[string]any{"event": event, "mono_ms": at}
	for k, v := range fields {
		line[k] = v
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// Stdout is a pipe to the bench; a line it cannot take is lost with the bench itself.
	_ = l.enc.Encode(line)
}

// Started prints the "started" line.
func (l *Log) Started(c Config, program string) {
	l.Event(MonoMS(), "started", map[string]any{
		"program":           program,
		"identity":          c.Identity,
		"pid":               os.Getpid(),
		"lease_duration_ms": c.LeaseDuration.Milliseconds(),
		"renew_deadline_ms": c.RenewDeadline.Milliseconds(),
		"retry_period_ms":   c.RetryPeriod.Milliseconds(),
	})
}

// Exit prints the "exit" line and ends the process.
func (l *Log) Exit(code int, reason string) {
	l.Event(MonoMS(), "exit", map[string]any{"code": code, "reason": reason})
	os.Exit(code)
}

// ObservedLock wraps the Lease lock the elector uses and reports what it does: each write of
// our own record (acquired, renewed), the release, and, while not leading, each change of
// the record it reads. The elector itself is client-go's, unchanged: it cannot tell the
// difference.
type ObservedLock struct {
	resourcelock.Interface
	log           *Log
	renewDeadline time.Duration
	leases        coordinationclient.LeasesGetter
	namespace     string
	name          string

	mu       sync.Mutex
	leading  bool
	stopped  bool
	lastSent float64
	term     int
	seen     string
}

// NewObservedLock wraps lock; leases reads the Lease for the term when leading starts.
func NewObservedLock(lock resourcelock.Interface, log *Log, c Config, leases coordinationclient.LeasesGetter) *ObservedLock {
	return &ObservedLock{
		Interface:     lock,
		log:           log,
		renewDeadline: c.RenewDeadline,
		leases:        leases,
		namespace:     c.Namespace,
		name:          c.Lease,
	}
}

// Get reads the record; while not leading, a change of holder or term is a "following" line.
func (l *ObservedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	at := MonoMS()
	rec, raw, err := l.Interface.Get(ctx)
	holder, term := "", -1
	switch {
	case err == nil:
		holder, term = rec.HolderIdentity, rec.LeaderTransitions
	case !apierrors.IsNotFound(err):
		return rec, raw, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := fmt.Sprintf("%s/%d", holder, term)
	if !l.leading && holder != l.Identity() && seen != l.seen {
		l.seen = seen
		fields := map[string]any{"holder": holder}
		if term >= 0 {
			fields["term"] = term
		}
		l.log.Event(at, "following", fields)
	}
	return rec, raw, err
}

// Create creates the Lease with our record.
func (l *ObservedLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := MonoMS()
	err := l.Interface.Create(ctx, ler)
	if err == nil {
		l.wrote(ler, sent, true)
	}
	return err
}

// Update replaces the Lease's record.
func (l *ObservedLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := MonoMS()
	err := l.Interface.Update(ctx, ler)
	if err == nil {
		l.wrote(ler, sent, false)
	}
	return err
}

// wrote reports a successful write of ler, sent at `sent`: a leadership may last until then
// plus the renew deadline (the elector gives up renewing by then).
func (l *ObservedLock) wrote(ler resourcelock.LeaderElectionRecord, sent float64, created bool) {
	at := MonoMS()
	l.mu.Lock()
	defer l.mu.Unlock()
	if ler.HolderIdentity == "" {
		l.log.Event(at, "released", map[string]any{"term": ler.LeaderTransitions, "sent_mono_ms": sent})
		return
	}
	if ler.HolderIdentity != l.Identity() {
		return
	}
	l.lastSent = sent
	valid := sent + float64(l.renewDeadline.Microseconds())/1e3
	fields := map[string]any{"term": ler.LeaderTransitions, "sent_mono_ms": sent, "valid_until_mono_ms": valid}
	switch {
	case !l.leading:
		// The term until the callback has read the server's.
		l.term = ler.LeaderTransitions
		fields["created"] = created
		l.log.Event(at, "acquired", fields)
	case created || ler.LeaderTransitions != l.term:
		// The Lease was deleted under us and the elector created a new one: a new record,
		// whose term started again. client-go goes on leading without telling anyone.
		l.term = ler.LeaderTransitions
		fields["recreated"] = true
		fields["renew_deadline_ms"] = l.renewDeadline.Milliseconds()
		l.log.Event(at, "started leading", fields)
	default:
		l.log.Event(at, "renewed", fields)
	}
}

// StartedLeading is the elector's callback: it reads the Lease for the term and prints
// "started leading". at is when the callback began.
func (l *ObservedLock) StartedLeading(ctx context.Context, at float64) int {
	lease, err := l.leases.Leases(l.namespace).Get(ctx, l.name, metav1.GetOptions{})
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		// The elector called back after the leadership had already ended.
		return l.term
	}
	holder := ""
	if err == nil {
		holder, l.term = leaseHolder(lease)
	}
	l.leading = true
	fields := map[string]any{
		"term":                l.term,
		"holder":              holder,
		"valid_until_mono_ms": l.lastSent + float64(l.renewDeadline.Microseconds())/1e3,
		"renew_deadline_ms":   l.renewDeadline.Milliseconds(),
	}
	if err != nil {
		fields["error"] = err.Error()
	}
	l.log.Event(at, "started leading", fields)
	return l.term
}

// StoppedLeading prints "stopped leading" once.
func (l *ObservedLock) StoppedLeading() {
	at := MonoMS()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || !l.leading {
		return
	}
	l.stopped = true
	l.leading = false
	l.log.Event(at, "stopped leading", nil)
}

// RecordEvent passes the elector's event on; "resumed leading" (client-go 0.38's recovery: the
// Lease it still held is renewed, OnStartedLeading is not called again) prints "started leading"
// with "resumed": true, as the leadership is valid again from the renewal just written.
func (l *ObservedLock) RecordEvent(s string) {
	l.Interface.RecordEvent(s)
	if s != "resumed leading" {
		return
	}
	at := MonoMS()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = false
	l.leading = true
	l.log.Event(at, "started leading", map[string]any{
		"term":                l.term,
		"resumed":             true,
		"valid_until_mono_ms": l.lastSent + float64(l.renewDeadline.Microseconds())/1e3,
		"renew_deadline_ms":   l.renewDeadline.Milliseconds(),
	})
}

// Term is the term of the current leadership.
func (l *ObservedLock) Term() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.term
}

func leaseHolder(lease *coordinationv1.Lease) (string, int) {
	holder, term := "", 0
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	if lease.Spec.LeaseTransitions != nil {
		term = int(*lease.Spec.LeaseTransitions)
	}
	return holder, term
}

// WriteFunc writes the leadership's seq-th value; it returns the object's resourceVersion.
type WriteFunc func(ctx context.Context, seq int) (string, error)

// WriteWhileLeading writes object at once and then every `every` until ctx ends: the work a
// controller does while it leads, on the leadership's own context, as client-go and
// controller-runtime hand it over. Each write is a "wrote" or "write failed" line.
func WriteWhileLeading(ctx context.Context, log *Log, lock *ObservedLock, object string, every time.Duration, write WriteFunc) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for seq := 1; ; seq++ {
		sent := MonoMS()
		rv, err := write(ctx, seq)
		at := MonoMS()
		fields := map[string]any{"object": object, "seq": seq, "term": lock.Term(), "sent_mono_ms": sent}
		if err != nil {
			fields["error"] = err.Error()
			log.Event(at, "write failed", fields)
		} else {
			fields["resource_version"] = rv
			log.Event(at, "wrote", fields)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Data is what each write puts in the ConfigMap: the writer and its sequence, so that every
// version the server holds names who wrote it.
func Data(identity string, term, seq int) map[string]string {
	return map[string]string{
		"holder": identity,
		"term":   fmt.Sprint(term),
		"seq":    fmt.Sprint(seq),
	}
}
