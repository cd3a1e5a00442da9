package plannedinputs_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/magosfleet/magos/agent/execution"
	"github.com/magosfleet/magos/agent/plannedinputs"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/testenv"
)

// secretValue is the sensitive literal of baseRun: a weak secret, the kind one guesses offline.
const secretValue = "hunter2"

// baseRun is a run with every kind of input: literals (one sensitive), Secret and ConfigMap
// references, and git credentials.
func baseRun() *execution.Run {
	ref := func(kind, name, key string) *corev1.EnvVarSource {
		if kind == "secret" {
			return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}
		}
		return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}
	}
	return &execution.Run{
		Spec: runner.Spec{
			Operation: runner.OperationPlan, RunID: "20250101-000000-abcdef", Namespace: "payments", Name: "network",
			RepoURL: "https://git.example/infra.git", Revision: "0123456789abcdef0123456789abcdef01234567",
			Path: "envs/prod", TfvarsPath: "prod.tfvars", Binary: "tofu", Version: "1.10.6",
		},
		Env: []corev1.EnvVar{
			{Name: runner.EnvGitPassword, ValueFrom: ref("secret", "git-credentials", "password")},
			{Name: runner.EnvGitUsername, ValueFrom: ref("secret", "git-credentials", "username")},
			{Name: "TF_VAR_db_password", Value: secretValue},
			{Name: "TF_VAR_region", Value: "eu-west-1"},
			{Name: "TF_VAR_tier", ValueFrom: ref("configmap", "app-config", "tier")},
			{Name: "TF_VAR_token", ValueFrom: ref("secret", "app-secrets", "token")},
		},
		Sensitive: []string{"TF_VAR_db_password"},
	}
}

// envValue sets the environment entry name of run (its value, or a reference) or, with a nil
// entry, removes it; an unknown name is added.
func envValue(run *execution.Run, name string, e *corev1.EnvVar) {
	for i := range run.Env {
		if run.Env[i].Name == name {
			if e == nil {
				run.Env = append(run.Env[:i], run.Env[i+1:]...)
			} else {
				run.Env[i] = *e
			}
			return
		}
	}
	if e != nil {
		run.Env = append(run.Env, *e)
	}
}

var (
	key      = bytes.Repeat([]byte{0x5a}, plannedinputs.KeySize)
	otherKey = append(bytes.Repeat([]byte{0x5a}, plannedinputs.KeySize-1), 0x5b)
)

// TestDigest: the same inputs give the same digest (the plan's and the apply's of one run), a
// change of any input gives another, and so does another key or another run.
func TestDigest(t *testing.T) {
	base := plannedinputs.Digest(key, baseRun())
	if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(base) {
		t.Fatalf("digest %q, want %d hex characters", base, plannedinputs.DigestLength)
	}
	tests := []struct {
		name   string
		change func(*execution.Run)
		same   bool
	}{
		{name: "the same inputs", change: func(*execution.Run) {}, same: true},
		{name: "the apply of the same run", change: func(r *execution.Run) { r.Spec.Operation = runner.OperationApply }, same: true},
		{name: "the revision in upper case", change: func(r *execution.Run) { r.Spec.Revision = strings.ToUpper(r.Spec.Revision) }, same: true},
		{name: "the version with a v", change: func(r *execution.Run) { r.Spec.Version = "v1.10.6" }, same: true},
		{name: "what the launcher fills in (plan file, backend)", change: func(r *execution.Run) {
			r.Spec.PlanFile = "/workspace-data/x.tfplan"
			r.Spec.Backend.LocalPath = "/tmp/state"
		}, same: true},
		{name: "other git credentials (left out)", change: func(r *execution.Run) {
			envValue(r, runner.EnvGitPassword, &corev1.EnvVar{Name: runner.EnvGitPassword, Value: "rotated"})
		}, same: true},

		{name: "repository", change: func(r *execution.Run) { r.Spec.RepoURL = "https://git.example/other.git" }},
		{name: "commit", change: func(r *execution.Run) { r.Spec.Revision = "1123456789abcdef0123456789abcdef01234567" }},
		{name: "path", change: func(r *execution.Run) { r.Spec.Path = "envs/staging" }},
		{name: "tfvarsPath", change: func(r *execution.Run) { r.Spec.TfvarsPath = "" }},
		{name: "binary", change: func(r *execution.Run) { r.Spec.Binary = "terraform" }},
		{name: "version", change: func(r *execution.Run) { r.Spec.Version = "1.10.7" }},
		{name: "a sensitive literal's value", change: func(r *execution.Run) {
			envValue(r, "TF_VAR_db_password", &corev1.EnvVar{Name: "TF_VAR_db_password", Value: secretValue + "!"})
		}},
		{name: "a sensitive literal emptied", change: func(r *execution.Run) {
			envValue(r, "TF_VAR_db_password", &corev1.EnvVar{Name: "TF_VAR_db_password"})
		}},
		{name: "a literal's value", change: func(r *execution.Run) {
			envValue(r, "TF_VAR_region", &corev1.EnvVar{Name: "TF_VAR_region", Value: "us-east-1"})
		}},
		{name: "a literal made a Secret reference", change: func(r *execution.Run) {
			envValue(r, "TF_VAR_region", &corev1.EnvVar{Name: "TF_VAR_region", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "region"}, Key: "eu-west-1"}}})
		}},
		{name: "a Secret reference's Secret", change: func(r *execution.Run) {
			envValue(r, "TF_VAR_token", &corev1.EnvVar{Name: "TF_VAR_token", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "other-secrets"}, Key: "token"}}})
		}},
		{name: "a Secret reference's key", change: func(r *execution.Run) {
			envValue(r, "TF_VAR_token", &corev1.EnvVar{Name: "TF_VAR_token", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app-secrets"}, Key: "token2"}}})
		}},
		{name: "a ConfigMap reference", change: func(r *execution.Run) {
			envValue(r, "TF_VAR_tier", &corev1.EnvVar{Name: "TF_VAR_tier", ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}, Key: "level"}}})
		}},
		{name: "a variable renamed", change: func(r *execution.Run) {
			envValue(r, "TF_VAR_region", nil)
			envValue(r, "TF_VAR_zone", &corev1.EnvVar{Name: "TF_VAR_zone", Value: "eu-west-1"})
		}},
		{name: "a variable added", change: func(r *execution.Run) {
			envValue(r, "TF_LOG", &corev1.EnvVar{Name: "TF_LOG", Value: "debug"})
		}},
		{name: "a variable removed", change: func(r *execution.Run) { envValue(r, "TF_VAR_region", nil) }},
		{name: "the sensitive literal removed", change: func(r *execution.Run) { envValue(r, "TF_VAR_db_password", nil) }},
		{name: "another run", change: func(r *execution.Run) { r.Spec.RunID = "20250101-000001-abcdef" }},
		{name: "another Workspace", change: func(r *execution.Run) { r.Spec.Name = "network-2" }},
		{name: "another namespace", change: func(r *execution.Run) { r.Spec.Namespace = "cdn" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := baseRun()
			tt.change(run)
			got := plannedinputs.Digest(key, run)
			if tt.same && got != base {
				t.Errorf("digest %s, want the base run's %s", got, base)
			}
			if !tt.same && got == base {
				t.Errorf("digest %s unchanged", got)
			}
		})
	}
}

// TestDigestNeedsTheKey: another key gives another digest, and without the key the digest does
// not give the sensitive literal away: it does not contain it, and trying candidate values
// (the secret among them) matches nothing, whether unkeyed (the former digest) or under keys one
// might guess. With the key the same search finds it: that is what the key protects.
func TestDigestNeedsTheKey(t *testing.T) {
	published := plannedinputs.Digest(key, baseRun())
	for _, k := range [][]byte{otherKey, bytes.Repeat([]byte{0}, plannedinputs.KeySize), append(bytes.Clone(key), 1)} {
		if got := plannedinputs.Digest(k, baseRun()); got == published {
			t.Errorf("digest %s under another key %x is the same", got, k)
		}
	}
	if strings.Contains(published, secretValue) || strings.Contains(published, hex.EncodeToString([]byte(secretValue))[:8]) {
		t.Errorf("digest %s contains the sensitive literal", published)
	}

	// What the former, unkeyed digest was: SHA-256 of the inputs.
	unkeyed := func(run *execution.Run) string {
		env := []corev1.EnvVar{}
		for _, e := range run.Env {
			if e.Name != runner.EnvGitUsername && e.Name != runner.EnvGitPassword {
				env = append(env, e)
			}
		}
		s := run.Spec
		raw, _ := json.Marshal(struct {
			RepoURL, Revision, Path, TfvarsPath, Binary, Version string
			Env                                                  []corev1.EnvVar
		}{s.RepoURL, s.Revision, s.Path, s.TfvarsPath, s.Binary, s.Version, env})
		sum := sha256.Sum256(raw)
		return hex.EncodeToString(sum[:])[:12]
	}
	candidates := []string{"password", "123456", "letmein", "hunter1", secretValue, "hunter3"}
	guess := func(digest func(*execution.Run) string) string { return guessAgainst(published, candidates, digest) }
	if found := guess(unkeyed); found != "" {
		t.Errorf("the unkeyed digest of the inputs finds the secret %q", found)
	}
	for _, k := range [][]byte{nil, {}, []byte(secretValue), otherKey} {
		if found := guess(func(r *execution.Run) string { return plannedinputs.Digest(k, r) }); found != "" {
			t.Errorf("a guessed key %x finds the secret %q", k, found)
		}
	}
	// The attack is sound: it works with the key, and against the former digest.
	if found := guess(func(r *execution.Run) string { return plannedinputs.Digest(key, r) }); found != secretValue {
		t.Errorf("with the key the search finds %q, want %q", found, secretValue)
	}
	if formerly := unkeyed(baseRun()); guessAgainst(formerly, candidates, unkeyed) != secretValue {
		t.Errorf("the former digest %s did not give the secret away: the test proves nothing", formerly)
	}
	// And it is an HMAC-SHA256 of something under the key, not of the key and value alone.
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(secretValue))
	if hex.EncodeToString(mac.Sum(nil))[:12] == published {
		t.Error("the digest is the HMAC of the literal alone")
	}
}

// guessAgainst returns the candidate whose run has the digest target under digest, or "".
func guessAgainst(target string, candidates []string, digest func(*execution.Run) string) string {
	for _, c := range candidates {
		run := baseRun()
		envValue(run, "TF_VAR_db_password", &corev1.EnvVar{Name: "TF_VAR_db_password", Value: c})
		if digest(run) == target {
			return c
		}
	}
	return ""
}

var keySecret = types.NamespacedName{Namespace: "magos-system", Name: "magos-agent-inputs-key"}

// keysServer starts a real API server for TestKeys (the key is kept, raced for and refused as
// an API server does it) and returns newClient: a client of it, on which the key's Secret is
// gone and objs are created.
func keysServer(t *testing.T) (newClient func(objs ...client.Object) client.WithWatch) {
	fleet := testenv.Start(t, localcluster.Options{NoHub: true, Spokes: []string{"agent"}, Bare: true})
	cfg := fleet.Cluster("agent").Config
	c, err := client.NewWithWatch(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: keySecret.Namespace}}); err != nil {
		t.Fatal(err)
	}
	return func(objs ...client.Object) client.WithWatch {
		t.Helper()
		ctx := context.Background()
		old := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: keySecret.Namespace, Name: keySecret.Name}}
		if err := c.Delete(ctx, old); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
}

func keyOf(t *testing.T, c client.Client, secret types.NamespacedName) []byte {
	t.Helper()
	k, err := plannedinputs.NewKeys(secret, c, c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := k.Key(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestKeys: the key is kept in the Secret, written once (into the Secret the chart creates
// empty, or a new Secret), and every later start, or another replica, reads the same.
func TestKeys(t *testing.T) {
	ctx := context.Background()
	newClient := keysServer(t)
	stored := func(c client.Client) []byte {
		s := &corev1.Secret{}
		if err := c.Get(ctx, keySecret, s); err != nil {
			t.Fatal(err)
		}
		return s.Data[plannedinputs.SecretKey]
	}
	t.Run("no Secret: created", func(t *testing.T) {
		c := newClient()
		first := keyOf(t, c, keySecret)
		if len(first) != plannedinputs.KeySize || !bytes.Equal(stored(c), first) {
			t.Fatalf("key of %d bytes, Secret holds %d bytes", len(first), len(stored(c)))
		}
		if again := keyOf(t, c, keySecret); !bytes.Equal(again, first) {
			t.Error("a restarted agent got another key")
		}
	})
	t.Run("the chart's empty Secret: filled", func(t *testing.T) {
		c := newClient(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: keySecret.Namespace, Name: keySecret.Name,
			Labels: map[string]string{"app.kubernetes.io/name": "magos-agent"}}})
		first := keyOf(t, c, keySecret)
		if len(first) != plannedinputs.KeySize || !bytes.Equal(stored(c), first) {
			t.Fatalf("key of %d bytes, Secret holds %d bytes", len(first), len(stored(c)))
		}
		if again := keyOf(t, c, keySecret); !bytes.Equal(again, first) {
			t.Error("a restarted agent got another key")
		}
	})
	t.Run("a key in the Secret: used as it is", func(t *testing.T) {
		own := bytes.Repeat([]byte("k"), 48)
		c := newClient(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: keySecret.Namespace, Name: keySecret.Name},
			Data: map[string][]byte{plannedinputs.SecretKey: own}})
		if got := keyOf(t, c, keySecret); !bytes.Equal(got, own) {
			t.Errorf("key %x, want the Secret's", got)
		}
	})
	t.Run("a key too short: refused, without showing it", func(t *testing.T) {
		c := newClient(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: keySecret.Namespace, Name: keySecret.Name},
			Data: map[string][]byte{plannedinputs.SecretKey: []byte("tiny-key")}})
		k, _ := plannedinputs.NewKeys(keySecret, c, c)
		_, err := k.Key(ctx)
		if err == nil || !strings.Contains(err.Error(), keySecret.String()) || !strings.Contains(err.Error(), "has 8 bytes, want at least 32") {
			t.Fatalf("error %v, want one naming the Secret and the sizes", err)
		}
		if strings.Contains(err.Error(), "tiny-key") {
			t.Errorf("error %q shows the key", err)
		}
	})
	t.Run("another replica writes first: its key wins", func(t *testing.T) {
		base := newClient(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: keySecret.Namespace, Name: keySecret.Name}})
		winner := bytes.Repeat([]byte("w"), plannedinputs.KeySize)
		raced := false
		c := interceptor.NewClient(base, interceptor.Funcs{Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if !raced {
				raced = true
				s := &corev1.Secret{}
				if err := cl.Get(ctx, keySecret, s); err != nil {
					return err
				}
				s.Data = map[string][]byte{plannedinputs.SecretKey: winner}
				if err := cl.Update(ctx, s); err != nil {
					return err
				}
			}
			return cl.Update(ctx, obj, opts...)
		}})
		if got := keyOf(t, c, keySecret); !raced || !bytes.Equal(got, winner) {
			t.Errorf("key %x (raced %v), want the other replica's", got, raced)
		}
		if !bytes.Equal(stored(base), winner) {
			t.Error("the other replica's key was overwritten")
		}
	})
	t.Run("an unreadable Secret: an error naming it, and no key", func(t *testing.T) {
		c := interceptor.NewClient(newClient(), interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, keySecret.Name, errors.New("RBAC"))
		}})
		k, _ := plannedinputs.NewKeys(keySecret, c, c)
		if _, err := k.Key(ctx); err == nil || !strings.Contains(err.Error(), "reading Secret "+keySecret.String()) {
			t.Errorf("error %v, want one naming the Secret", err)
		}
	})
	t.Run("no Secret configured: a key in memory", func(t *testing.T) {
		c := newClient()
		a, _ := plannedinputs.NewKeys(types.NamespacedName{}, c, c)
		b, _ := plannedinputs.NewKeys(types.NamespacedName{Name: "no-namespace"}, c, c)
		ka, _ := a.Key(ctx)
		kb, _ := b.Key(ctx)
		if a.Kept() || b.Kept() || len(ka) != plannedinputs.KeySize || bytes.Equal(ka, kb) {
			t.Errorf("kept %v %v, keys of %d bytes equal %v: want two random keys in memory", a.Kept(), b.Kept(), len(ka), bytes.Equal(ka, kb))
		}
		list := &corev1.SecretList{}
		if err := c.List(ctx, list); err != nil || len(list.Items) != 0 {
			t.Errorf("Secrets %v (%v), want none written", list.Items, err)
		}
	})
}

// TestPlanDigest: the plan digest follows the plan and the Workspace, not the run, and needs the
// key.
func TestPlanDigest(t *testing.T) {
	const plan, other = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"
	d := plannedinputs.PlanDigest(key, "ns", "app", plan)
	if len(d) != plannedinputs.DigestLength {
		t.Fatalf("digest %q: want %d hex characters", d, plannedinputs.DigestLength)
	}
	if again := plannedinputs.PlanDigest(key, "ns", "app", plan); again != d {
		t.Errorf("the same plan has digests %s and %s", d, again)
	}
	for name, got := range map[string]string{
		"another plan":      plannedinputs.PlanDigest(key, "ns", "app", other),
		"another Workspace": plannedinputs.PlanDigest(key, "ns", "db", plan),
		"another namespace": plannedinputs.PlanDigest(key, "ns2", "app", plan),
		"another key":       plannedinputs.PlanDigest(otherKey, "ns", "app", plan),
	} {
		if got == d {
			t.Errorf("%s: digest %s, want another", name, got)
		}
	}
}
