// Command clientgo-trace runs one client-go shared informer on ConfigMaps and prints every
// handler call as one normalized JSON line, for the differential conformance test of
// kube-informer (tests/e2e/conformance.rs; the protocol is in conformance/README.md).
//
// Built twice from this one source: with go.mod (client-go v0.37, in-order informers, the only
// mode there) and with -modfile=go035.mod (client-go v0.35, where KUBE_FEATURE_InOrderInformers=false
// still selects the DeltaFIFO path).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	clientfeatures "k8s.io/client-go/features"
)

// call is one handler invocation, normalized: only what both implementations must agree on.
type call struct {
	Handler   string `json:"handler"`
	Call      string `json:"call"`
	Key       string `json:"key"`
	Initial   bool   `json:"initial"`
	OldRV     string `json:"old_rv"`
	OldUID    string `json:"old_uid"`
	NewRV     string `json:"new_rv"`
	NewUID    string `json:"new_uid"`
	Tombstone bool   `json:"tombstone"`
}

var out = struct {
	sync.Mutex
	w *bufio.Writer
}{w: bufio.NewWriter(os.Stdout)}

// emit writes one JSON line and flushes it, so the reader sees each call as it happens.
func emit(v any) {
	line, err := json.Marshal(v)
	if err != nil {
		fatal("encode: %v", err)
	}
	out.Lock()
	defer out.Unlock()
	out.w.Write(line)
	out.w.WriteByte('\n')
	out.w.Flush()
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "clientgo-trace: "+format+"\n", args...)
	os.Exit(2)
}

func meta(obj any) (rv, uid string) {
	if m, err := metaAccessor(obj); err == nil {
		return m.GetResourceVersion(), string(m.GetUID())
	}
	return "", ""
}

func metaAccessor(obj any) (metav1.Object, error) {
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		return cm, nil
	}
	return nil, fmt.Errorf("not a ConfigMap: %T", obj)
}

func keyOf(obj any) string {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		fatal("key: %v", err)
	}
	return key
}

func handler(id string) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			rv, uid := meta(obj)
			emit(call{Handler: id, Call: "add", Key: keyOf(obj), Initial: isInInitialList, NewRV: rv, NewUID: uid})
		},
		UpdateFunc: func(oldObj, newObj any) {
			orv, ouid := meta(oldObj)
			nrv, nuid := meta(newObj)
			emit(call{Handler: id, Call: "update", Key: keyOf(newObj), OldRV: orv, OldUID: ouid, NewRV: nrv, NewUID: nuid})
		},
		DeleteFunc: func(obj any) {
			c := call{Handler: id, Call: "delete", Key: keyOf(obj)}
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				c.Tombstone = true
				obj = t.Obj
			}
			c.OldRV, c.OldUID = meta(obj)
			emit(c)
		},
	}
}

// reportedGates are the client-go feature gates that decide how the informer delivers handler
// calls: the FIFO, its atomic relists and resyncs, batching, and streaming lists.
var reportedGates = []string{
	"AtomicFIFO",
	"InOrderInformers",
	"InOrderInformersBatchProcess",
	"UnlockWhileProcessingFIFO",
	"WatchListClient",
}

// gateStates reports each of reportedGates as client-go's informers read it (the
// KUBE_FEATURE_* variables applied), null for a gate this client-go does not have (v0.35 has
// neither AtomicFIFO nor UnlockWhileProcessingFIFO).
func gateStates(gates clientfeatures.Gates) map[string]any {
	states := map[string]any{}
	for _, name := range reportedGates {
		states[name] = gateState(gates, clientfeatures.Feature(name))
	}
	return states
}

func gateState(gates clientfeatures.Gates, gate clientfeatures.Feature) (state any) {
	// Enabled panics on a gate it does not know.
	defer func() {
		if recover() != nil {
			state = nil
		}
	}()
	return gates.Enabled(gate)
}

func restConfig(kubeconfig, server, token, caFile string) *rest.Config {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			fatal("kubeconfig: %v", err)
		}
		return cfg
	}
	if server == "" {
		fatal("give --kubeconfig or --server (with --token and --ca-file)")
	}
	return &rest.Config{Host: server, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}}
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (instead of --server/--token/--ca-file)")
	server := flag.String("server", "", "API server URL")
	token := flag.String("token", "", "bearer token")
	caFile := flag.String("ca-file", "", "PEM CA bundle that signs the server certificate")
	namespace := flag.String("namespace", "", "watch only this namespace (default: all)")
	selector := flag.String("label-selector", "", "watch only ConfigMaps matching this label selector")
	// With 0, client-go never resyncs, whatever the handlers' own periods: a handler period
	// only lowers a non-zero check period (sharedIndexInformer.AddEventHandlerWithOptions).
	informerResync := flag.Int("informer-resync", 0, "the informer's default resync period, seconds")
	flag.Parse()

	cfg := restConfig(*kubeconfig, *server, *token, *caFile)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fatal("client: %v", err)
	}
	opts := []informers.SharedInformerOption{informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = *selector
	})}
	if *namespace != "" {
		opts = append(opts, informers.WithNamespace(*namespace))
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, time.Duration(*informerResync)*time.Second, opts...)
	informer := factory.Core().V1().ConfigMaps().Informer()

	// Two handlers before start: no resync, and a resync every second (client-go's minimum).
	for _, h := range []struct {
		id     string
		period time.Duration
	}{{"h0", 0}, {"h1", time.Second}} {
		if _, err := informer.AddEventHandlerWithResyncPeriod(handler(h.id), h.period); err != nil {
			fatal("add handler %s: %v", h.id, err)
		}
	}
	gates := clientfeatures.FeatureGates()
	emit(map[string]any{"hello": map[string]any{
		"impl":            "client-go",
		"in_order":        gates.Enabled(clientfeatures.InOrderInformers),
		"watch_list":      gates.Enabled(clientfeatures.WatchListClient),
		"namespace":       *namespace,
		"label_selector":  *selector,
		"informer_resync": *informerResync,
		"gates":           gateStates(gates),
	}})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())

	// Commands, one a line: `dump` prints the cache as key → RV (with has_synced);
	// `add-handler ID SECONDS` adds a handler now; `quit` stops the informer and exits.
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fields := strings.Fields(in.Text())
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "dump":
			cacheRVs := map[string]string{}
			for _, obj := range informer.GetStore().List() {
				rv, _ := meta(obj)
				cacheRVs[keyOf(obj)] = rv
			}
			emit(map[string]any{"dump": cacheRVs, "synced": informer.HasSynced()})
		case "add-handler":
			if len(fields) != 3 {
				fatal("usage: add-handler ID SECONDS")
			}
			secs, err := strconv.Atoi(fields[2])
			if err != nil {
				fatal("add-handler: %v", err)
			}
			if _, err := informer.AddEventHandlerWithResyncPeriod(handler(fields[1]), time.Duration(secs)*time.Second); err != nil {
				fatal("add handler %s: %v", fields[1], err)
			}
			emit(map[string]any{"added": fields[1]})
		case "quit":
			cancel()
			factory.Shutdown()
			emit(map[string]any{"bye": true})
			return
		default:
			fatal("unknown command %q", fields[0])
		}
	}
}
