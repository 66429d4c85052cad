// S6 for client-go: memory and reads of an informer cache of N Pods (cache.Indexer with the
// namespace index and an ordinal-bucket index, read through the Pod lister), measured the way
// bench/src/bin/s6-reads.rs measures kube-informer's. The Pods are the podgen Pods that
// `s6-reads dump` writes as JSON lines, decoded with encoding/json as client-go's JSON decoder
// does (the decoded struct is the same from protobuf). Heap held = HeapAlloc after two GCs once
// every Pod is stored, minus the same before the first line is read (each line is read and
// decoded inside the loop, as s6-reads builds each Pod's JSON inside its own); HeapAlloc counts
// size-class-rounded bytes, s6-reads' counting allocator the requested ones.
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
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)

	// As s6-reads builds each Pod's JSON inside its loop, each line is read inside this one:
	// the baseline holds no input, only the scanner's buffer, which stays live (and counted
	// on both sides) to the second heap() below. The keys are listed after the second
	// heap(), so nothing but the indexer is counted.
	before := heap()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		"bucket": func(obj interface{}) ([]string, error) {
			return []string{strconv.Itoa(ordinal(obj.(*corev1.Pod)) / 1000)}, nil
		},
	})
	pods := 0
	start := time.Now()
	for sc.Scan() {
		pod := &corev1.Pod{}
		// encoding/json copies what it keeps (strings, FieldsV1's raw bytes): the Pod holds
		// no reference to the scanner's buffer.
		if err := json.Unmarshal(sc.Bytes(), pod); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := indexer.Add(pod); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		pods++
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	load := time.Since(start)
	held := int64(heap()) - int64(before)
	runtime.KeepAlive(sc)
	f.Close()
	keys := indexer.ListKeys()
	fmt.Printf("client-go cache.Indexer: %d Pods, stored in %.2f s\n", pods, load.Seconds())
	// HeapAlloc counts the size-class-rounded bytes of each object; s6-reads counts the bytes
	// each allocation asked for.
	fmt.Printf("  heap held by the cache: %.1f MiB, %.0f bytes per Pod (HeapAlloc: size-class rounded)\n", float64(held)/(1<<20), float64(held)/float64(pods))

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
