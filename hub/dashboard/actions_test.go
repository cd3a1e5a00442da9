package dashboard_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/dashboard"
	"github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
)

// post POSTs body as JSON to path with the token and decodes the answer into out; it returns
// the HTTP status. header adds or replaces request headers.
func (f *fixture) post(token, path string, body any, out any, header ...string) int {
	f.t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(f.ctx, http.MethodPost, f.base+path, bytes.NewReader(b))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			f.t.Fatalf("POST %s: %d %q: %v", path, res.StatusCode, raw, err)
		}
	}
	return res.StatusCode
}

func rules(resource string, verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{magosv1.GroupVersion.Group}, Resources: []string{resource}, Verbs: verbs}
}

// grantIn binds the ServiceAccount team-a/name to a Role in namespace ns with rules.
func (f *fixture) grantIn(ns, name string, rules ...rbacv1.PolicyRule) {
	f.t.Helper()
	f.create(&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules})
	f.create(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "team-a", Name: name}}})
}

// TestDashboardActions: the dashboard's actions are made with the caller's own token, so the
// hub's API server decides (RBAC and the magos-hub admission policy): the permissions it reports
// are the caller's (SelfSubjectAccessReview), a person without the verb approve is refused when
// they call the API anyway and nothing is written, and what a person may do is written in
// their own name: an approval, a rejection with its reason, a pause, a retry on a mirror. A
// request that is not JSON, or comes from another origin, is refused.
func TestDashboardActions(t *testing.T) {
	f := start(t)
	const plan = "0123456789abcdef"
	ro := hubtest.Rollout("team-a", "web", []string{"us", "eu"}, map[string]string{"region": "us-east-1"}, map[string]string{"region": "eu-west-1"})
	ro.Spec.Strategy.Steps[1].RequireApproval = true
	f.create(ro)
	ro.Status = magosv1.RolloutStatus{Phase: magosv1.PhaseReconciling, Reason: magosv1.ReasonAwaitingApproval, ObservedGeneration: ro.Generation,
		CurrentStep: 1, CurrentStepName: "eu",
		Steps: []magosv1.StepStatus{{Name: "us", Phase: magosv1.StepCompleted},
			{Name: "eu", Phase: magosv1.StepAwaitingApproval, Plans: []magosv1.PlanStatus{
				{Workspace: "eu-west-1/team-a/web", Revision: strings.Repeat("a", 40), Digest: plan, Add: 1, Destroy: 2}}}}}
	if err := f.admin.Status().Update(f.ctx, ro); err != nil {
		t.Fatal(err)
	}
	eu := f.mirror("eu-west-1", "team-a", "web", "web", map[string]string{"region": "eu-west-1"}, magosv1.PhaseApplied)
	eu.Status.CurrentRunID = "20261206T120000-0badcafe"
	if err := f.admin.Status().Update(f.ctx, eu); err != nil {
		t.Fatal(err)
	}

	approver := f.user("team-a", "approver", read("workspaces"), rules("rollouts", "get", "list", "watch", "update", "patch", "approve"))
	f.grantIn(mirror.Namespace("eu-west-1"), "approver", rules("workspaces", "get", "list", "patch", "retry"))
	// May write the Rollout, but lacks the verb approve; may patch mirrors, but lacks retry.
	writer := f.user("team-a", "writer", read("workspaces"), rules("rollouts", "get", "list", "watch", "update", "patch"))
	f.grantIn(mirror.Namespace("eu-west-1"), "writer", rules("workspaces", "get", "list", "patch"))
	viewer := f.user("team-a", "viewer", read("rollouts", "workspaces"))
	path := "/api/v1/namespaces/team-a/rollouts/web/"

	// What each may do, as the API server says.
	for _, tt := range []struct {
		who   string
		token string
		want  dashboard.Permissions
	}{
		{"approver", approver, dashboard.Permissions{Approve: true, Pause: true, Retry: map[string]bool{"eu-west-1": true, "us-east-1": false}}},
		{"writer", writer, dashboard.Permissions{Approve: false, Pause: true, Retry: map[string]bool{"eu-west-1": false, "us-east-1": false}}},
		{"viewer", viewer, dashboard.Permissions{Retry: map[string]bool{"eu-west-1": false, "us-east-1": false}}},
	} {
		var got dashboard.Permissions
		if code := f.get(tt.token, path+"permissions?cluster=eu-west-1&cluster=us-east-1", &got); code != http.StatusOK || got.Approve != tt.want.Approve ||
			got.Pause != tt.want.Pause || len(got.Retry) != 2 || got.Retry["eu-west-1"] != tt.want.Retry["eu-west-1"] || got.Retry["us-east-1"] {
			t.Errorf("permissions of the %s: %d %+v, want %+v", tt.who, code, got, tt.want)
		}
	}

	// Refused: by the admission policy (no verb approve), by RBAC (no update), by the dashboard.
	var e dashboard.Error
	if code := f.post(writer, path+"approve", dashboard.ActionRequest{Step: "eu"}, &e); code != http.StatusForbidden ||
		!strings.Contains(e.Error, "needs the verb approve") {
		t.Errorf("approve by a writer without the verb approve: %d %q, want 403 naming the verb", code, e.Error)
	}
	if code := f.post(writer, path+"reject", dashboard.ActionRequest{Step: "eu", Reason: "no"}, &e); code != http.StatusForbidden ||
		!strings.Contains(e.Error, "needs the verb approve") {
		t.Errorf("reject by a writer without the verb approve: %d %q, want 403 naming the verb", code, e.Error)
	}
	if code := f.post(viewer, path+"pause", nil, &e); code != http.StatusForbidden {
		t.Errorf("pause by a viewer: %d %q, want 403", code, e.Error)
	}
	if code := f.post(writer, "/api/v1/clusters/eu-west-1/namespaces/team-a/workspaces/web/retry", nil, &e); code != http.StatusForbidden ||
		!strings.Contains(e.Error, "needs the verb retry") {
		t.Errorf("retry by a writer without the verb retry: %d %q, want 403 naming the verb", code, e.Error)
	}
	if code := f.post(approver, path+"reject", dashboard.ActionRequest{Step: "eu"}, &e); code != http.StatusBadRequest {
		t.Errorf("reject without a reason: %d %q, want 400", code, e.Error)
	}
	if code := f.post(approver, path+"approve", dashboard.ActionRequest{Step: "us"}, &e); code != http.StatusConflict ||
		!strings.Contains(e.Error, "step us does not require approval") {
		t.Errorf("approve a step without requireApproval: %d %q, want 409", code, e.Error)
	}
	if code := f.post(approver, path+"approve", dashboard.ActionRequest{Step: "eu"}, &e, "Content-Type", "application/x-www-form-urlencoded"); code != http.StatusUnsupportedMediaType {
		t.Errorf("approve as a form: %d %q, want 415", code, e.Error)
	}
	if code := f.post(approver, path+"approve", dashboard.ActionRequest{Step: "eu"}, &e, "Origin", "https://evil.example.com"); code != http.StatusForbidden {
		t.Errorf("approve from another origin: %d %q, want 403", code, e.Error)
	}
	var got magosv1.Rollout
	read := func() {
		t.Helper()
		got = magosv1.Rollout{}
		if err := f.admin.Get(f.ctx, client.ObjectKey{Namespace: "team-a", Name: "web"}, &got); err != nil {
			t.Fatal(err)
		}
	}
	read()
	if len(got.Spec.Approvals)+len(got.Spec.Rejections) != 0 || got.Spec.Paused {
		t.Fatalf("refused actions wrote approvals %+v, rejections %+v, paused %v", got.Spec.Approvals, got.Spec.Rejections, got.Spec.Paused)
	}

	// Done, in the approver's own name.
	const who = "system:serviceaccount:team-a:approver"
	var res dashboard.ActionResult
	if code := f.post(approver, path+"reject", dashboard.ActionRequest{Step: "eu", Reason: "it destroys the queue"}, &res); code != http.StatusOK || res.By != who {
		t.Fatalf("reject: %d %+v", code, res)
	}
	read()
	if r := got.Spec.Rejections; len(r) != 1 || r[0].Step != "eu" || r[0].RejectedBy != who || r[0].Reason != "it destroys the queue" ||
		len(r[0].Plans) != 1 || r[0].Plans[0].Digest != plan || r[0].Plans[0].Workspace != "eu-west-1/team-a/web" {
		t.Errorf("rejections %+v: want eu's plan rejected by the approver with the reason", r)
	}
	// An approval on a status older than the spec is refused until the hub decides the spec
	// (this fixture runs no decision controllers: the test writes the status as the hub would).
	if code := f.post(approver, path+"approve", dashboard.ActionRequest{Step: "eu"}, &e); code != http.StatusConflict ||
		!strings.Contains(e.Error, "has not decided the Rollout's latest spec yet") {
		t.Errorf("approve on a stale status: %d %q, want 409", code, e.Error)
	}
	got.Status = ro.Status
	got.Status.ObservedGeneration = got.Generation
	if err := f.admin.Status().Update(f.ctx, &got); err != nil {
		t.Fatal(err)
	}
	if code := f.post(approver, path+"approve", dashboard.ActionRequest{Step: "eu"}, &res); code != http.StatusOK {
		t.Fatalf("approve: %d %+v", code, res)
	}
	read()
	if a := got.Spec.Approvals; len(a) != 1 || a[0].ApprovedBy != who || len(a[0].Plans) != 1 || a[0].Plans[0].Digest != plan || len(got.Spec.Rejections) != 0 {
		t.Errorf("approvals %+v, rejections %+v: want eu's plan approved by the approver, the rejection gone", a, got.Spec.Rejections)
	}
	if code := f.post(approver, path+"pause", nil, &res); code != http.StatusOK {
		t.Fatalf("pause: %d %+v", code, res)
	}
	read()
	if !got.Spec.Paused || got.Annotations[keys.PausedBy] != who {
		t.Errorf("after pause: paused %v, %s %q", got.Spec.Paused, keys.PausedBy, got.Annotations[keys.PausedBy])
	}
	if code := f.post(approver, "/api/v1/clusters/eu-west-1/namespaces/team-a/workspaces/web/retry", nil, &res); code != http.StatusOK || res.Run != eu.Status.CurrentRunID {
		t.Fatalf("retry: %d %+v", code, res)
	}
	var m magosv1.Workspace
	if err := f.admin.Get(f.ctx, client.ObjectKeyFromObject(eu), &m); err != nil {
		t.Fatal(err)
	}
	if m.Annotations[keys.RetryRun] != eu.Status.CurrentRunID || m.Annotations[keys.RequestedBy] != who {
		t.Errorf("mirror annotations %v: want a retry of %s requested by the approver", m.Annotations, eu.Status.CurrentRunID)
	}

	// The admission policy holds paused-by to its writer: the writer cannot resume in the
	// approver's name with a plain patch that leaves the annotation as it was.
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"paused":false}}`))
	wc := f.clientAs(writer)
	if err := wc.Patch(f.ctx, &magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web"}}, patch); err == nil ||
		!strings.Contains(err.Error(), "paused-by must name whoever last changed spec.paused") {
		t.Errorf("resume by a plain patch under another's paused-by: %v, want refused", err)
	}
}

// clientAs is a client of the hub's API server that authenticates with token only.
func (f *fixture) clientAs(token string) client.Client {
	f.t.Helper()
	cfg := rest.AnonymousClientConfig(f.cfg)
	cfg.BearerToken = token
	c, err := client.New(cfg, client.Options{Scheme: f.admin.Scheme()})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}
