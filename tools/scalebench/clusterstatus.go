package scalebench

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// clusterStatusWatch counts, from a watch of the hub's Clusters of its own, what each change of
// a Cluster's status changed, by field: which of the hub's per-cluster writes the fleet pays
// for while timed. A change that alters several fields counts once for each.
type clusterStatusWatch struct {
	mu      sync.Mutex
	changes map[string]float64
	stop    context.CancelFunc
	done    chan struct{}
}

// watchClusterStatus starts counting the status changes of the hub's Clusters from now on.
func watchClusterStatus(ctx context.Context, c client.WithWatch) (*clusterStatusWatch, error) {
	var list magosv1.ClusterList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing the hub's Clusters: %w", err)
	}
	last := make(map[string]magosv1.ClusterStatus, len(list.Items))
	for _, cl := range list.Items {
		last[cl.Name] = cl.Status
	}
	wctx, stop := context.WithCancel(ctx)
	// A watch the API server ends (after 30 minutes or more) is started again from the last
	// version seen, so that a long run is counted whole.
	w, err := watchtools.NewRetryWatcherWithContext(wctx, list.ResourceVersion, &toolscache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, &magosv1.ClusterList{}, &client.ListOptions{Raw: &o})
		},
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("watching the hub's Clusters: %w", err)
	}
	s := &clusterStatusWatch{changes: map[string]float64{}, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer w.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				cl, isCluster := ev.Object.(*magosv1.Cluster)
				if !isCluster || ev.Type != watch.Modified {
					continue
				}
				before, seen := last[cl.Name]
				last[cl.Name] = cl.Status
				if !seen {
					continue
				}
				s.mu.Lock()
				for _, f := range statusFieldsChanged(before, cl.Status) {
					s.changes[f]++
				}
				s.mu.Unlock()
			}
		}
	}()
	return s, nil
}

// close stops the watch; result may still be called.
func (s *clusterStatusWatch) close() {
	s.stop()
	<-s.done
}

// result stops the watch and returns the changes counted, by field.
func (s *clusterStatusWatch) result() map[string]float64 {
	s.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changes
}

// statusFieldsChanged names the fields of a Cluster's status that differ between a and b.
func statusFieldsChanged(a, b magosv1.ClusterStatus) []string {
	var out []string
	for _, f := range []struct {
		name string
		a, b any
	}{
		{"lastHeartbeatTime", a.LastHeartbeatTime, b.LastHeartbeatTime},
		{"clockOffset", a.ClockOffset, b.ClockOffset},
		{"syncedSince", a.SyncedSince, b.SyncedSince},
		{"mirrored", a.Mirrored, b.Mirrored},
		{"workspaces", a.Workspaces, b.Workspaces},
		{"agentVersion", a.AgentVersion, b.AgentVersion},
		{"conditions", a.Conditions, b.Conditions},
	} {
		if !equality.Semantic.DeepEqual(f.a, f.b) {
			out = append(out, f.name)
		}
	}
	return out
}
