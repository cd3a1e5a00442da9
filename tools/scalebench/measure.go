package scalebench

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"

	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/testenv"
)

// Percentile returns the q-quantile (0 < q <= 1) of ds by the nearest-rank method: the smallest
// value at least q of them do not exceed. Zero when ds is empty.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(q*float64(len(s)) + 0.999999)
	return s[min(max(rank, 1), len(s))-1]
}

// hubMetrics is what the benchmark reads from the hub's Prometheus endpoint.
type hubMetrics struct {
	// Requests is the hub's API requests so far (rest_client_requests_total, all series),
	// ByMethod the same by HTTP method.
	Requests float64
	ByMethod map[string]float64
	// Heap is the hub's live heap (go_memstats_heap_alloc_bytes).
	Heap float64
	// Throttled is the time the hub's requests so far waited for its client's rate limiter
	// (the sum of magos_hub_api_throttle_wait_seconds).
	Throttled float64
}

// scrape reads the hub's metrics at addr.
func scrape(ctx context.Context, addr string) (hubMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return hubMetrics{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return hubMetrics{}, fmt.Errorf("reading the hub's metrics: %w", err)
	}
	defer resp.Body.Close()
	families, err := parseMetrics(resp.Body)
	if err != nil {
		return hubMetrics{}, fmt.Errorf("parsing the hub's metrics: %w", err)
	}
	m := hubMetrics{ByMethod: map[string]float64{}}
	for _, s := range families["rest_client_requests_total"].GetMetric() {
		m.Requests += s.GetCounter().GetValue()
		m.ByMethod[label(s, "method")] += s.GetCounter().GetValue()
	}
	if _, ok := families["magos_hub_api_throttle_wait_seconds"]; !ok {
		return hubMetrics{}, errors.New("the hub's metrics have no magos_hub_api_throttle_wait_seconds")
	}
	for _, s := range families["magos_hub_api_throttle_wait_seconds"].GetMetric() {
		m.Throttled += s.GetHistogram().GetSampleSum()
	}
	for _, s := range families["go_memstats_heap_alloc_bytes"].GetMetric() {
		m.Heap += s.GetGauge().GetValue()
	}
	return m, nil
}

// sampler records the peak RSS of a process and the peak heap its metrics report, once a
// second until stopped.
type sampler struct {
	mu        sync.Mutex
	rss, heap float64
	stop      context.CancelFunc
	done      chan struct{}
}

func startSampler(ctx context.Context, pid int, metrics string) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			s.sample(ctx, pid, metrics)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *sampler) sample(ctx context.Context, pid int, metrics string) {
	rss := float64(localcluster.RSSBytes(pid))
	m, err := scrape(ctx, metrics)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rss = max(s.rss, rss)
	if err == nil {
		s.heap = max(s.heap, m.Heap)
	}
}

// peaks stops the sampler and returns the peak RSS and heap, in bytes.
func (s *sampler) peaks() (rss, heap float64) {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rss, s.heap
}

// requestCounter counts the HTTP requests sent through the transports it wraps (every attempt,
// whatever its answer), by method and, for writes, by resource. The benchmark wraps the
// emulated agents' hub rest configs with it, never their spoke ones.
type requestCounter struct {
	mu         sync.Mutex
	byMethod   map[string]float64
	byResource map[string]float64 // writes only, by resource (and subresource)
	// leases are the heartbeats' requests (to the resource "leases"): how long each took, and
	// those that failed (a transport error or an answer of 400 or more), by answer.
	leaseTimes  []time.Duration
	leaseFailed map[string]float64
	// renewed are the times the heartbeats' writes (a Lease's create or update) were answered
	// with success, by namespace (one per cluster), in order: when each renewal landed, as the
	// agents saw it.
	renewed map[string][]time.Time
}

func newRequestCounter() *requestCounter {
	return &requestCounter{byMethod: map[string]float64{}, byResource: map[string]float64{}, leaseFailed: map[string]float64{}, renewed: map[string][]time.Time{}}
}

// wrap is a rest.Config.WrapTransport that counts each request, then sends it on.
func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return testenv.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		c.mu.Lock()
		c.byMethod[req.Method]++
		if isWrite(req.Method) {
			c.byResource[resourceOf(req.URL.Path)]++
		}
		c.mu.Unlock()
		if resourceOf(req.URL.Path) != "leases" {
			return rt.RoundTrip(req)
		}
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		took := time.Since(start)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.leaseTimes = append(c.leaseTimes, took)
		switch {
		case err != nil:
			c.leaseFailed["error"]++
		case resp.StatusCode >= 400:
			c.leaseFailed[strconv.Itoa(resp.StatusCode)]++
		case isWrite(req.Method):
			ns := namespaceOf(req.URL.Path)
			c.renewed[ns] = append(c.renewed[ns], start.Add(took))
		}
		return resp, err
	})
}

// renewalGaps returns, for each cluster that renewed its Lease, the longest time between two
// renewals that landed from from to to, as the agents saw them: counting from the last renewal
// before from, and to to after the last one. It is the benchmark's own measure of what the hub
// judges a cluster silent by (no renewal for a lease duration), taken where the requests are
// answered rather than where the hub sees them.
func (c *requestCounter) renewalGaps(from, to time.Time) map[string]time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	gaps := map[string]time.Duration{}
	for ns, times := range c.renewed {
		last, longest := time.Time{}, time.Duration(0)
		for _, t := range times {
			if t.After(to) {
				break
			}
			if !last.IsZero() && t.After(from) {
				longest = max(longest, t.Sub(later(last, from)))
			}
			last = t
		}
		if !last.IsZero() {
			gaps[ns] = max(longest, to.Sub(later(last, from)))
		}
	}
	return gaps
}

// leases returns how long the heartbeats' requests took since the first from of them, and
// their failures so far, by answer.
func (c *requestCounter) leases(from int) (times []time.Duration, n int, failed map[string]float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.leaseTimes[min(from, len(c.leaseTimes)):]), len(c.leaseTimes), maps.Clone(c.leaseFailed)
}

// snapshot returns the counts so far, by method and (writes only) by resource.
func (c *requestCounter) snapshot() (byMethod, byResource map[string]float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byMethod), maps.Clone(c.byResource)
}

// isWrite reports whether an HTTP method writes: every verb but get, list and watch (GET),
// that is create (POST), update (PUT), patch (PATCH) and delete (DELETE).
func isWrite(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// resourceOf returns the resource (and subresource) a Kubernetes API path names, e.g.
// "workspaces/status" for /apis/magosproject.io/v1alpha1/namespaces/ns/workspaces/w/status,
// or the path itself if it names none.
func resourceOf(path string) string {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(seg) >= 3 && seg[0] == "api":
		seg = seg[2:]
	case len(seg) >= 4 && seg[0] == "apis":
		seg = seg[3:]
	default:
		return path
	}
	if len(seg) >= 3 && seg[0] == "namespaces" {
		seg = seg[2:]
	}
	if len(seg) >= 3 {
		return seg[0] + "/" + seg[2]
	}
	return seg[0]
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// namespaceOf returns the namespace a Kubernetes API path names ("" if none), e.g. "ns" for
// /apis/coordination.k8s.io/v1/namespaces/ns/leases/l.
func namespaceOf(path string) string {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	if i := slices.Index(seg, "namespaces"); i >= 0 && i+1 < len(seg) {
		return seg[i+1]
	}
	return ""
}

// queueing is what the API server's priority and fairness (APF) did with the requests it
// served, by priority level: how many it dispatched, how long they waited in its queues (the
// sum, in seconds), and how many it rejected (429); and the writes it served, by resource (and
// subresource), whoever sent them.
type queueing struct {
	Dispatched, Waited, Rejected map[string]float64
	Writes                       map[string]float64
}

// scrapeQueueing reads the APF metrics of the API server of c.
func scrapeQueueing(ctx context.Context, c *localcluster.Cluster) (queueing, error) {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return queueing{}, err
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return queueing{}, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	families, err := parseMetrics(bytes.NewReader(raw))
	if err != nil {
		return queueing{}, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	q := queueing{Dispatched: map[string]float64{}, Waited: map[string]float64{}, Rejected: map[string]float64{}, Writes: map[string]float64{}}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		switch label(m, "verb") {
		// The API server labels a request with its HTTP method (a create is POST, an update
		// PUT), but reads (LIST, WATCH) and server-side apply (APPLY).
		case http.MethodPost, http.MethodPut, http.MethodPatch, "APPLY", http.MethodDelete:
		default:
			continue
		}
		resource := label(m, "resource")
		if sub := label(m, "subresource"); sub != "" {
			resource += "/" + sub
		}
		q.Writes[resource] += m.GetCounter().GetValue()
	}
	for _, m := range families["apiserver_flowcontrol_dispatched_requests_total"].GetMetric() {
		q.Dispatched[label(m, "priority_level")] += m.GetCounter().GetValue()
	}
	for _, m := range families["apiserver_flowcontrol_request_wait_duration_seconds"].GetMetric() {
		q.Waited[label(m, "priority_level")] += m.GetHistogram().GetSampleSum()
	}
	for _, m := range families["apiserver_flowcontrol_rejected_requests_total"].GetMetric() {
		q.Rejected[label(m, "priority_level")] += m.GetCounter().GetValue()
	}
	return q, nil
}

// parseMetrics parses a Prometheus text exposition into its metric families, by name.
func parseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(r)
}

// label returns the value of m's label name ("" when it has none).
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// since returns the counts of q less those of before.
func (q queueing) since(before queueing) queueing {
	return queueing{Dispatched: since(before.Dispatched, q.Dispatched), Waited: since(before.Waited, q.Waited), Rejected: since(before.Rejected, q.Rejected),
		Writes: since(before.Writes, q.Writes)}
}

// String lists the priority levels that dispatched, waited or rejected anything, busiest first:
// "workload-low: 1234 dispatched, mean wait 12 ms, 0 rejected; …".
func (q queueing) String() string {
	levels := slices.Collect(maps.Keys(q.Dispatched))
	for l := range q.Rejected {
		if _, ok := q.Dispatched[l]; !ok {
			levels = append(levels, l)
		}
	}
	slices.SortFunc(levels, func(a, b string) int {
		return cmp.Compare(q.Dispatched[b]+q.Rejected[b], q.Dispatched[a]+q.Rejected[a])
	})
	var parts []string
	for _, l := range levels {
		if q.Dispatched[l]+q.Rejected[l] == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: %.0f dispatched, mean wait %.0f ms, %.0f rejected", l, q.Dispatched[l],
			1000*q.Waited[l]/max(q.Dispatched[l], 1), q.Rejected[l]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}
