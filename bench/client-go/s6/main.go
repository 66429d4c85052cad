// S6 for client-go: memory and reads of an informer cache of N Pods (cache.Indexer with the
// namespace index and an ordinal-bucket index, read through the Pod lister), measured the way
// bench/src/bin/s6-reads.rs measures kube-informer's. The Pods are the podgen Pods that
// `s6-reads dump` writes as JSON lines, decoded with encoding/json as client-go's JSON decoder
// does (the decoded struct is the same from protobuf).
//
//	go run ./s6 -pods pods.jsonl [-samples 20000]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func report(what string, times []time.Duration) {
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	p := func(q float64) float64 {
		return float64(times[int(float64(len(times)-1)*q+0.5)].Nanoseconds()) / 1e3
	}
	fmt.Printf("  %-34s p50 %9.2f µs   p99 %9.2f µs   (n=%d)\n", what, p(0.5), p(0.99), len(times))
}

func ordinal(p *corev1.Pod) int {
	i := strings.LastIndex(p.Name, "-")
	n, _ := strconv.Atoi(p.Name[i+1:])
	return n
}

func main() {
	path := flag.String("pods", "", "JSON lines of Pods (s6-reads dump)")
	samples := flag.Int("samples", 20000, "gets per measurement")
	flag.Parse()
	f, err := os.Open(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var lines [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		lines = append(lines, append([]byte(nil), sc.Bytes()...))
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	f.Close()
	pods := len(lines)

	before := heap()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		"bucket": func(obj interface{}) ([]string, error) {
			return []string{strconv.Itoa(ordinal(obj.(*corev1.Pod)) / 1000)}, nil
		},
	})
	keys := make([]string, 0, pods)
	start := time.Now()
	for i := range lines {
		pod := &corev1.Pod{}
		if err := json.Unmarshal(lines[i], pod); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		lines[i] = nil
		if err := indexer.Add(pod); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		k, _ := cache.MetaNamespaceKeyFunc(pod)
		keys = append(keys, k)
	}
	load := time.Since(start)
	lines = nil
	held := int64(heap()) - int64(before) - int64(cap(keys))*16
	for _, k := range keys {
		held -= int64(len(k))
	}
	fmt.Printf("client-go cache.Indexer: %d Pods, stored in %.2f s\n", pods, load.Seconds())
	fmt.Printf("  heap held by the cache: %.1f MiB, %.0f bytes per Pod\n", float64(held)/(1<<20), float64(held)/float64(pods))

	rng := rand.New(rand.NewSource(11))
	cold := make([]time.Duration, *samples)
	for i := range cold {
		k := keys[rng.Intn(pods)]
		t := time.Now()
		_, ok, _ := indexer.GetByKey(k)
		cold[i] = time.Since(t)
		if !ok {
			panic(k)
		}
	}
	report("get_by_key cold", cold)
	hotKeys := make([]string, 200)
	for i := range hotKeys {
		hotKeys[i] = keys[rng.Intn(pods)]
	}
	hot := make([]time.Duration, *samples)
	for i := range hot {
		k := hotKeys[rng.Intn(len(hotKeys))]
		t := time.Now()
		_, ok, _ := indexer.GetByKey(k)
		hot[i] = time.Since(t)
		if !ok {
			panic(k)
		}
	}
	report("get_by_key hot (200 keys)", hot)

	lister := listers.NewPodLister(indexer)
	reps := 10
	nsList := make([]time.Duration, reps)
	for r := range nsList {
		ns := fmt.Sprintf("%s-%d", []string{"commerce", "platform", "growth", "data", "identity"}[r%5], r%20)
		t := time.Now()
		got, _ := lister.Pods(ns).List(labels.Everything())
		nsList[r] = time.Since(t)
		if len(got) != pods/20 {
			panic(fmt.Sprintf("%s: %d", ns, len(got)))
		}
	}
	report(fmt.Sprintf("namespaced list of %d", pods/20), nsList)
	byIndex := make([]time.Duration, reps)
	for r := range byIndex {
		t := time.Now()
		got, _ := indexer.ByIndex("bucket", strconv.Itoa(r%(pods/1000)))
		byIndex[r] = time.Since(t)
		if len(got) != 1000 {
			panic(len(got))
		}
	}
	report("by_index returning 1,000", byIndex)
	runtime.KeepAlive(indexer)
}
