// Benchmark client: client-go's shared informer factory, Pod informer, no-op counting handlers,
// asking for JSON so it decodes the same bytes as the Rust clients (S1-S4; with --kubeconfig, for
// S5, client-go's default protobuf against a real apiserver). Same options and RESULT line
// as the Rust clients (see ../src/measure.rs).
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

var start = time.Now()

func cpu() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func statusKB(field string) string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
		}
	}
	return "0"
}

func wall() float64 { return time.Since(start).Seconds() }

func main() {
	addr := flag.String("addr", "127.0.0.1:18080", "replay server host:port")
	mode := flag.String("mode", "sync", "sync, watch or relist")
	events := flag.Uint64("events", 0, "watch events to wait for")
	handlers := flag.Int("handlers", 1, "number of handlers")
	changed := flag.Uint64("changed", 0, "updates the relist brings")
	strip := flag.String("strip", "false", "strip managedFields before objects reach the cache")
	kubeconfig := flag.String("kubeconfig", "", "a real cluster's kubeconfig (S5): client-go's defaults, protobuf; --addr ignored")
	protobuf := flag.String("protobuf", "false", "ask the replay server for protobuf (its --protobuf true), as client-go's clientsets do by default")
	flag.Parse()
	// Plain list+watch like the other clients: no streaming initial list.
	os.Setenv("KUBE_FEATURE_WatchListClient", "false")

	cfg := &rest.Config{
		Host: "http://" + *addr,
		ContentConfig: rest.ContentConfig{
			ContentType:        "application/json",
			AcceptContentTypes: "application/json",
		},
	}
	if *protobuf == "true" {
		cfg.ContentConfig = rest.ContentConfig{
			ContentType:        "application/vnd.kubernetes.protobuf",
			AcceptContentTypes: "application/vnd.kubernetes.protobuf,application/json",
		}
	}
	if *kubeconfig != "" {
		// As an ordinary client-go program would: no content type set, so the clientset asks
		// for protobuf.
		var err error
		if cfg, err = clientcmd.BuildConfigFromFlags("", *kubeconfig); err != nil {
			panic(err)
		}
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	var opts []informers.SharedInformerOption
	if *strip == "true" {
		opts = append(opts, informers.WithTransform(func(obj interface{}) (interface{}, error) {
			if a, err := meta.Accessor(obj); err == nil {
				a.SetManagedFields(nil)
			}
			return obj, nil
		}))
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, opts...)
	inf := factory.Core().V1().Pods().Informer()

	target := ^uint64(0)
	switch *mode {
	case "watch":
		target = *events
	case "relist":
		target = *changed
	}
	// In a relist only updates whose resourceVersion changed count toward the target: with no
	// resync period the informer also delivers every unchanged relisted object as an update
	// (shared_informer.go), so counting those would stop after about a tenth of the relist's
	// notifications. The changed Pods are spread over the list, so the last of them is handled
	// near its end (kube-runtime stops at the relist's InitDone).
	changedOnly := *mode == "relist"
	var done atomic.Int64
	allDone := make(chan struct{})
	// Adds each handler was told of, to see when every handler has had the listed objects.
	added := make([]*atomic.Uint64, *handlers)
	for i := 0; i < *handlers; i++ {
		var count atomic.Uint64
		adds := new(atomic.Uint64)
		added[i] = adds
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(_ interface{}) { adds.Add(1) },
			UpdateFunc: func(oldObj, newObj interface{}) {
				if changedOnly && oldObj.(*corev1.Pod).ResourceVersion == newObj.(*corev1.Pod).ResourceVersion {
					return
				}
				if count.Add(1) == target && done.Add(1) == int64(*handlers) {
					close(allDone)
				}
			},
		})
		if err != nil {
			panic(err)
		}
	}
	stop := make(chan struct{})
	factory.Start(stop)
	for !inf.HasSynced() {
		time.Sleep(time.Millisecond)
	}
	synced, cpuSync := wall(), cpu()
	objects := len(inf.GetStore().ListKeys())
	out := fmt.Sprintf(" synced_s=%.4f cpu_sync_s=%.4f objects=%d", synced, cpuSync, objects)
	// Synced means the informer has handed the list to its handlers' buffers; this is when
	// every handler has been called for every listed object (polled every millisecond).
	for _, adds := range added {
		for adds.Load() < uint64(objects) {
			time.Sleep(time.Millisecond)
		}
	}
	out += fmt.Sprintf(" handled_s=%.4f cpu_handled_s=%.4f", wall(), cpu())
	switch *mode {
	case "watch":
		// Releases the replay server's watch events if it holds them (--gate-watch). If it did,
		// no event was sent before this call, so the watch phase is timed from it (the time
		// until every handler had the list is the sync's); if not, events have flowed since the
		// sync and the phase starts there.
		markWall, markCPU := wall(), cpu()
		resp, err := http.Get("http://" + *addr + "/start-watch")
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		from, fromCPU, gated := synced, cpuSync, 0
		if strings.TrimSpace(string(body)) == "gated" {
			from, fromCPU, gated = markWall, markCPU, 1
		}
		<-allDone
		w, c := wall()-from, cpu()-fromCPU
		out += fmt.Sprintf(" watch_from_start=%d", gated)
		out += fmt.Sprintf(" watch_s=%.4f events_per_s=%.0f cpu_per_event_us=%.3f", w, float64(*events)/w, c/float64(*events)*1e6)
	case "relist":
		time.Sleep(time.Second)
		out += " steady_kb=" + statusKB("VmRSS")
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			fmt.Fprintln(os.Stderr, "cannot reset VmHWM:", err)
		}
		t0 := wall()
		resp, err := http.Get("http://" + *addr + "/relist")
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		<-allDone
		out += fmt.Sprintf(" relist_s=%.4f", wall()-t0)
	}
	out += " hwm_kb=" + statusKB("VmHWM") + fmt.Sprintf(" cpu_total_s=%.4f", cpu())
	fmt.Println("RESULT" + out)
	os.Exit(0)
}
