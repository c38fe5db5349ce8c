// Command client-go-proxy-client is a controller's client side through two gateway-leader
// proxies, with client-go's own machinery: a shared informer that lists and watches ConfigMaps
// through --follower-kubeconfig, and typed-client writes (create, update, patch) through both.
//
// Through the follower's proxy every write must fail with the proxy's 503 Status (which asks
// for no wait, so client-go returns the error at once); through the leader's proxy every
// write must land, and the informer, still fed by the follower's proxy, must see each object
// at the resourceVersion the leader's last write returned.
//
// It prints one JSON object on stdout and exits 0, or exits 1 with the reason on stderr:
//
//	{"refused": [{"op": "create", "name": "...", "code": 503, "reason": "ServiceUnavailable",
//	              "message": "..."}, ...],
//	 "written": {"NAME": "RV", ...},   the resourceVersion of the leader's last write of each
//	 "seen":    {"NAME": "RV", ...}}   the resourceVersion the informer holds for each
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const program = "client-go-proxy-client"

type refusal struct {
	Op      string `json:"op"`
	Name    string `json:"name"`
	Code    int32  `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

type report struct {
	Refused []refusal         `json:"refused"`
	Written map[string]string `json:"written"`
	Seen    map[string]string `json:"seen"`
}

func main() {
	var followerPath, leaderPath, ns, prefix string
	var count int
	var wait time.Duration
	fs := flag.NewFlagSet(program, flag.ContinueOnError)
	fs.StringVar(&followerPath, "follower-kubeconfig", "", "kubeconfig of the follower's proxy (required)")
	fs.StringVar(&leaderPath, "leader-kubeconfig", "", "kubeconfig of the leader's proxy (required)")
	fs.StringVar(&ns, "namespace", "default", "namespace of the ConfigMaps")
	fs.StringVar(&prefix, "prefix", "client-go", "prefix of the ConfigMaps' names")
	fs.IntVar(&count, "count", 3, "ConfigMaps written through the leader")
	fs.DurationVar(&wait, "wait", 60*time.Second, "how long the informer may take to see a write")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if followerPath == "" || leaderPath == "" || count < 1 || count > 100 {
		fmt.Fprintln(os.Stderr, "--follower-kubeconfig and --leader-kubeconfig are required; --count is 1 to 100")
		os.Exit(2)
	}
	follower, err := clientFor(followerPath)
	if err != nil {
		fail(err)
	}
	leader, err := clientFor(leaderPath)
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The informer, through the follower's proxy, as a controller's would be.
	factory := informers.NewSharedInformerFactoryWithOptions(follower, 0, informers.WithNamespace(ns))
	lister := factory.Core().V1().ConfigMaps().Lister()
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			fail(fmt.Errorf("the informer of %v did not sync through the follower's proxy", typ))
		}
	}

	r := report{Refused: []refusal{}, Written: map[string]string{}, Seen: map[string]string{}}
	// Writes through the follower: all refused, side by side.
	refused, err := followerWrites(ctx, follower, ns, prefix)
	if err != nil {
		fail(err)
	}
	r.Refused = refused

	// Writes through the leader: each object created, updated, then patched.
	cms := leader.CoreV1().ConfigMaps(ns)
	for i := 0; i < count; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"step": "created"}}
		created, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			fail(fmt.Errorf("create %s through the leader: %w", name, err))
		}
		created.Data["step"] = "updated"
		updated, err := cms.Update(ctx, created, metav1.UpdateOptions{})
		if err != nil {
			fail(fmt.Errorf("update %s through the leader: %w", name, err))
		}
		patched, err := cms.Patch(ctx, name, types.MergePatchType,
			[]byte(`{"data":{"step":"patched"}}`), metav1.PatchOptions{})
		if err != nil {
			fail(fmt.Errorf("patch %s through the leader: %w", name, err))
		}
		if patched.ResourceVersion == updated.ResourceVersion {
			fail(fmt.Errorf("patch %s through the leader changed nothing", name))
		}
		r.Written[name] = patched.ResourceVersion
	}

	// The informer, still through the follower, catches up with every write of the leader.
	deadline := time.Now().Add(wait)
	for name, rv := range r.Written {
		for {
			got, err := lister.ConfigMaps(ns).Get(name)
			if err == nil && got.ResourceVersion == rv {
				r.Seen[name] = got.ResourceVersion
				break
			}
			if time.Now().After(deadline) {
				fail(fmt.Errorf("the informer through the follower did not see %s at %s within %v (%v, %v)",
					name, rv, wait, got, err))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	out, err := json.Marshal(r)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(out))
}

// clientFor is a typed client for the kubeconfig at path.
func clientFor(path string) (*kubernetes.Clientset, error) {
	config, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return kubernetes.NewForConfig(rest.AddUserAgent(config, program))
}

// followerWrites makes one create, update and patch through the follower, side by side, and
// returns how each was refused; an error if one was not refused with a Status.
func followerWrites(ctx context.Context, c *kubernetes.Clientset, ns, prefix string) ([]refusal, error) {
	cms := c.CoreV1().ConfigMaps(ns)
	name := prefix + "-through-follower"
	ops := map[string]func() error{
		"create": func() error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
			_, err := cms.Create(ctx, cm, metav1.CreateOptions{})
			return err
		},
		"update": func() error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-0"},
				Data: map[string]string{"step": "follower"}}
			_, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
			return err
		},
		"patch": func() error {
			_, err := cms.Patch(ctx, prefix+"-0", types.MergePatchType,
				[]byte(`{"data":{"step":"follower"}}`), metav1.PatchOptions{})
			return err
		},
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := []refusal{}
	var errs []error
	for op, do := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := do()
			mu.Lock()
			defer mu.Unlock()
			var status apierrors.APIStatus
			if err == nil || !errors.As(err, &status) {
				errs = append(errs, fmt.Errorf("%s through the follower: not refused with a Status: %v", op, err))
				return
			}
			s := status.Status()
			out = append(out, refusal{Op: op, Name: name, Code: s.Code, Reason: string(s.Reason), Message: s.Message})
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", program, err)
	os.Exit(1)
}
