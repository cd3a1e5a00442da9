package samples_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/testenv"
)

func TestSamplesApply(t *testing.T) {
	fleet := testenv.Start(t, localcluster.Options{NoHub: true, Spokes: []string{"cluster"}})
	c := fleet.Spokes["cluster"].Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	files, err := filepath.Glob(filepath.Join("..", "..", "samples", "*", "*.yaml"))
	if err != nil || len(files) < 10 {
		t.Fatalf("found %d sample files: %v", len(files), err)
	}
	for i, f := range files {
		t.Run(filepath.Base(filepath.Dir(f))+"/"+filepath.Base(f), func(t *testing.T) {
			objs, err := localcluster.DecodeFile(f)
			if err != nil || len(objs) == 0 {
				t.Fatalf("%d objects: %v", len(objs), err)
			}
			// The spoke files of one pattern repeat names (one cdn-edge per region cluster);
			// each file gets a namespace of its own on this one API server.
			ns := fmt.Sprintf("sample-%d", i)
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			for _, obj := range objs {
				if obj.GetKind() != "Project" && obj.GetKind() != "Rollout" {
					obj.SetNamespace(ns)
				}
				if err := c.Create(ctx, obj); err != nil {
					t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
				}
			}
		})
	}
	var rollouts magosv1.RolloutList
	if err := c.List(ctx, &rollouts); err != nil || len(rollouts.Items) != 3 {
		t.Fatalf("rollouts: %v, %d", err, len(rollouts.Items))
	}
	var ws magosv1.WorkspaceList
	if err := c.List(ctx, &ws); err != nil || len(ws.Items) != 3+3+9 {
		t.Fatalf("workspaces: %v, %d", err, len(ws.Items))
	}
	for _, w := range ws.Items {
		if w.Spec.Source.Path != "samples/modules/hello" || w.Spec.AutoApply == nil || !*w.Spec.AutoApply {
			t.Errorf("%s: spec not as written or not defaulted: %+v", w.Name, w.Spec)
		}
	}
}
