package hubsync_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/testenv"
	"github.com/magosfleet/magos/pkg/version"
)

// logLines collects an agent's log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{})
}

// find returns the first line holding every part.
func (l *logLines) find(parts ...string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return line, true
		}
	}
	return "", false
}

// TestAgentOutsideTheSkewPolicyIsRefused runs the real hub's registry with an agent two minor
// versions ahead of it (the hub here is an unstamped build, version.DevVersion). The hub refuses
// the agent on its Cluster (Available False, AgentVersionSkew, with the policy in the message)
// and writes its own version on the agent's Lease; the agent, reading it, refuses from its side
// too: a grant written on its mirror is not carried down, and its log says why. The same agent
// at a version within the policy is taken, and the grant reaches the spoke.
func TestAgentOutsideTheSkewPolicyIsRefused(t *testing.T) {
	ctx := context.Background()
	const (
		cluster = "us-east-1"
		ns      = "skew-test"
		ahead   = "v0.2.0"
	)
	if err := version.Compatible(version.Get(), ahead); err == nil {
		t.Fatalf("the test needs an agent version outside the policy of hub %s", version.Get())
	}
	spoke := env.Spokes[cluster].Client
	ensureNamespace(t, spoke, ns)
	ws := newWorkspace(ns, "api")
	if err := spoke.Create(ctx, ws); err != nil {
		t.Fatal(err)
	}
	logs := &logLines{}
	logger := logs.logger()
	stop := startAgent(t, cluster, agentOptions{heartbeat: 300 * time.Millisecond, lease: 3 * time.Second, version: ahead, logger: &logger})

	// The hub's side.
	testenv.Eventually(t, 60*time.Second, func() error {
		cl := &magosv1.Cluster{}
		if err := env.Hub.Client.Get(ctx, client.ObjectKey{Name: cluster}, cl); err != nil {
			return err
		}
		c := meta.FindStatusCondition(cl.Status.Conditions, magosv1.ConditionAvailable)
		want := fmt.Sprintf("agent %s is outside the supported version skew: hub %s supports agents %s", ahead, version.Get(), version.SupportedBy(version.Get()))
		if c == nil || c.Reason != magosv1.ReasonAgentVersionSkew || !strings.Contains(c.Message, want) {
			return fmt.Errorf("Available = %+v, want reason %s saying %q", c, magosv1.ReasonAgentVersionSkew, want)
		}
		l, err := agentLease(cluster)
		if err != nil {
			return err
		}
		if got := l.Annotations[keys.HubVersion]; got != version.Get() {
			return fmt.Errorf("the Lease names hub version %q", got)
		}
		return nil
	})
	// The agent's side: it logs the refusal once it has read the hub's version...
	testenv.Eventually(t, 30*time.Second, func() error {
		if _, ok := logs.find("outside the version skew policy", `"hubVersion"="`+version.Get()+`"`, `"agentVersion"="`+ahead+`"`); !ok {
			return errors.New("the agent has not logged that the hub is outside the skew policy")
		}
		return nil
	})
	// ...and carries no grant down: a grant written on the mirror (standing for a hub that would
	// decide on the agent anyway) is withheld, and the log names it.
	var m *magosv1.Workspace
	testenv.Eventually(t, 60*time.Second, func() error {
		m = &magosv1.Workspace{}
		return env.Hub.Client.Get(ctx, client.ObjectKey{Namespace: mirror.Namespace(cluster), Name: mirror.Name(ns, "api")}, m)
	})
	grant := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true",%q:"run-skew",%q:"rollout"}}}`, keys.ExecutionAllowed, keys.GrantedRun, keys.GrantedBy)
	if err := env.Hub.Client.Patch(ctx, m, client.RawPatch(types.MergePatchType, []byte(grant))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if _, ok := logs.find("not carrying the hub's decision down", "run-skew"); !ok {
			return errors.New("the agent has not logged the withheld grant")
		}
		return nil
	})
	got := &magosv1.Workspace{}
	if err := spoke.Get(ctx, client.ObjectKeyFromObject(ws), got); err != nil {
		t.Fatal(err)
	}
	if d := mirror.Decisions(got); len(d) != 0 {
		t.Fatalf("the refused agent carried the decision %v down", d)
	}

	// Upgraded (restarted at a version within the policy), the agent is taken and the grant
	// travels down.
	stop()
	startAgent(t, cluster, agentOptions{heartbeat: 300 * time.Millisecond, lease: 3 * time.Second, version: version.Get()})
	testenv.Eventually(t, 60*time.Second, clusterAvailable(cluster, true))
	testenv.Eventually(t, 60*time.Second, func() error {
		got := &magosv1.Workspace{}
		if err := spoke.Get(ctx, client.ObjectKeyFromObject(ws), got); err != nil {
			return err
		}
		if got.Annotations[keys.GrantedRun] != "run-skew" {
			return fmt.Errorf("spoke decision %v, want the grant of run-skew", mirror.Decisions(got))
		}
		return nil
	})
}
