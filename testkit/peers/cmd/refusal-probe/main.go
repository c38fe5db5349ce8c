// Command refusal-probe measures what a client does with each answer a write-gating proxy could
// give a write it refuses: how many times the client sends the write, and how long it takes to
// return the error to its caller. The clients are client-go's typed client, controller-runtime's
// client and, with --kubectl, kubectl; each creates one ConfigMap against a loopback server that
// answers its reads (discovery) as an apiserver would and every write with the candidate, as the
// proxy passes reads and refuses writes. "requests" counts the writes the server saw.
//
// It prints one JSON object per candidate and client on stdout, a line each:
//
//	{"answer": "503 Retry-After: 1", "client": "client-go", "requests": 11, "ms": 10012.5,
//	 "error": "..."}
//
// and exits 0, or exits 1 with the reason on stderr.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
)

const program = "refusal-probe"

// An answer the proxy could give a refused write.
type answer struct {
	Name       string
	Code       int
	Reason     string
	RetryAfter int // seconds; -1: no Retry-After header
}

var answers = []answer{
	{"503 Retry-After: 1", http.StatusServiceUnavailable, "ServiceUnavailable", 1},
	{"503", http.StatusServiceUnavailable, "ServiceUnavailable", -1},
	{"429 Retry-After: 1", http.StatusTooManyRequests, "TooManyRequests", 1},
	{"429", http.StatusTooManyRequests, "TooManyRequests", -1},
	{"409", http.StatusConflict, "Conflict", -1},
	{"403", http.StatusForbidden, "Forbidden", -1},
}

type row struct {
	Answer   string  `json:"answer"`
	Client   string  `json:"client"`
	Requests int64   `json:"requests"`
	Ms       float64 `json:"ms"`
	Error    string  `json:"error"`
}

func main() {
	var kubectl string
	var timeout time.Duration
	fs := flag.NewFlagSet(program, flag.ContinueOnError)
	fs.StringVar(&kubectl, "kubectl", "", "a kubectl to measure as well (optional)")
	fs.DurationVar(&timeout, "timeout", 60*time.Second, "the longest one write may take")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	crlog.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", program)
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	out := json.NewEncoder(os.Stdout)
	for _, a := range answers {
		var requests atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				discovery(w, r)
				return
			}
			requests.Add(1)
			refuse(w, a)
		}))
		cfg := &rest.Config{Host: srv.URL, Timeout: timeout}
		clients := []struct {
			name  string
			write func(context.Context) error
		}{
			{"client-go", func(ctx context.Context) error {
				cs, err := kubernetes.NewForConfig(cfg)
				if err != nil {
					return err
				}
				_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, configMap(), metav1.CreateOptions{})
				return err
			}},
			{"controller-runtime", func(ctx context.Context) error {
				c, err := client.New(cfg, client.Options{})
				if err != nil {
					return err
				}
				return c.Create(ctx, configMap())
			}},
		}
		if kubectl != "" {
			kubeconfig := filepath.Join(dir, "kubeconfig")
			if err := os.WriteFile(kubeconfig, []byte(kubeconfigFor(srv.URL)), 0o600); err != nil {
				fail(err)
			}
			clients = append(clients, struct {
				name  string
				write func(context.Context) error
			}{"kubectl", func(ctx context.Context) error {
				cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig,
					"create", "configmap", "probe", "-n", "default")
				msg, err := cmd.CombinedOutput()
				if err != nil {
					return fmt.Errorf("%w: %s", err, msg)
				}
				return nil
			}})
		}
		for _, c := range clients {
			requests.Store(0)
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			start := time.Now()
			err := c.write(ctx)
			took := time.Since(start)
			cancel()
			if err == nil {
				fail(fmt.Errorf("%s: a write answered %q succeeded", c.name, a.Name))
			}
			if err := out.Encode(row{
				Answer:   a.Name,
				Client:   c.name,
				Requests: requests.Load(),
				Ms:       float64(took.Microseconds()) / 1000,
				Error:    err.Error(),
			}); err != nil {
				fail(err)
			}
		}
		srv.Close()
	}
}

// refuse answers as the proxy would: a Kubernetes Status of the answer's code and reason.
func refuse(w http.ResponseWriter, a answer) {
	status := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  "refused by " + program,
		Reason:   metav1.StatusReason(a.Reason),
		Code:     int32(a.Code),
	}
	if a.RetryAfter >= 0 {
		status.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(a.RetryAfter)}
		w.Header().Set("Retry-After", strconv.Itoa(a.RetryAfter))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.Code)
	_ = json.NewEncoder(w).Encode(status)
}

// discovery answers the reads a client makes before it writes a ConfigMap: the core group and
// its configmaps, no other group; anything else is not found.
func discovery(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/api":
		_, _ = w.Write([]byte(`{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[]}`))
	case "/apis":
		_, _ = w.Write([]byte(`{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`))
	case "/api/v1":
		_, _ = w.Write([]byte(`{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"v1","resources":[` +
			`{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap",` +
			`"verbs":["create","delete","get","list","patch","update","watch"]}]}`))
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
	}
}

func configMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"}}
}

func kubeconfigFor(server string) string {
	return "apiVersion: v1\nkind: Config\nclusters:\n- name: probe\n  cluster:\n    server: " + server +
		"\ncontexts:\n- name: probe\n  context:\n    cluster: probe\n    user: probe\nusers:\n- name: probe\n  user: {}\n" +
		"current-context: probe\n"
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", program, err)
	os.Exit(1)
}
