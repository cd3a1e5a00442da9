// Package runoutput defines the Secret that keeps what one operation (plan or apply) of a
// Workspace's run printed: its plan text and the tail of its log, gzipped. The agent writes one
// per operation, owned by the Workspace, in the Workspace's namespace, and (unless the Workspace
// opts out with spec.runHistory.copyToHub: false) a Copy of it on the hub, owned by the
// Workspace's mirror, in the mirror's namespace. magosctl and the hub's dashboard read them
// through Read.
//
// The Secrets are immutable: an operation's output never changes once it ended.
package runoutput

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"

	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/runner"
)

// SecretType is the type of an output Secret.
const SecretType corev1.SecretType = keys.Prefix + "run-output"

// Keys of an output Secret's data.
const (
	// KeyLog is the gzipped tail of the operation's log.
	KeyLog = "log.gz"
	// KeyPlan is the gzipped plan text (plans only).
	KeyPlan = "plan.gz"
)

// Annotations of an output Secret.
const (
	// AnnotationOutputBytes is the size of the whole output the operation printed.
	AnnotationOutputBytes = keys.Prefix + "output-bytes"
	// AnnotationLogTruncated is "true" when the log kept is only the output's end.
	AnnotationLogTruncated = keys.Prefix + "log-truncated"
	// AnnotationPlanTruncated is "true" when the plan text kept is only its beginning.
	AnnotationPlanTruncated = keys.Prefix + "plan-truncated"
	// AnnotationUnavailable says why the output could not be read (the Secret then holds
	// nothing else).
	AnnotationUnavailable = keys.Prefix + "output-unavailable"
)

// LabelOperation is the label naming the operation (plan or apply) of an output Secret.
const LabelOperation = keys.JobType

// SecretName is the name of the output Secret of one operation of a Workspace's run:
// "<workspace>-<run ID in lower case>-<operation>". Workspace names are at most 63 characters,
// so the name always fits.
func SecretName(workspace, runID string, op runner.Operation) string {
	return workspace + "-" + strings.ToLower(runID) + "-" + string(op)
}

// Labels are the labels of the output Secret of one operation of the Workspace named workspace.
func Labels(workspace, runID string, op runner.Operation) map[string]string {
	return map[string]string{keys.Workspace: workspace, keys.RunID: runID, LabelOperation: string(op)}
}

// New returns the output Secret (without owner) of one operation in namespace; unavailable,
// when not empty, says why out could not be read and out is then ignored.
func New(namespace, workspace, runID string, op runner.Operation, out runner.Output, unavailable string) (*corev1.Secret, error) {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   namespace,
			Name:        SecretName(workspace, runID, op),
			Labels:      Labels(workspace, runID, op),
			Annotations: map[string]string{},
		},
		Type:      SecretType,
		Immutable: new(true),
		Data:      map[string][]byte{},
	}
	if unavailable != "" {
		s.Annotations[AnnotationUnavailable] = unavailable
		return s, nil
	}
	s.Annotations[AnnotationOutputBytes] = strconv.FormatInt(out.Bytes, 10)
	if out.LogTruncated {
		s.Annotations[AnnotationLogTruncated] = "true"
	}
	var err error
	if s.Data[KeyLog], err = compress(out.Log); err != nil {
		return nil, err
	}
	if out.PlanText != "" {
		if out.PlanTruncated {
			s.Annotations[AnnotationPlanTruncated] = "true"
		}
		if s.Data[KeyPlan], err = compress(out.PlanText); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Copy returns a copy of the output Secret s for the Workspace named workspace in namespace,
// owned by owner: the same data and annotations, under the name and labels SecretName and
// Labels give that Workspace. The agent keeps such a copy on the hub for the mirror of the
// Workspace whose output s is (named after the mirror, in the mirror's namespace). It returns
// an error when s is not an output Secret.
func Copy(s *corev1.Secret, namespace, workspace string, owner metav1.OwnerReference) (*corev1.Secret, error) {
	runID, op := s.Labels[keys.RunID], runner.Operation(s.Labels[LabelOperation])
	if s.Type != SecretType || runID == "" || op == "" {
		return nil, fmt.Errorf("secret %s/%s is not a run's output Secret (type %q, labels %v)", s.Namespace, s.Name, s.Type, s.Labels)
	}
	data := make(map[string][]byte, len(s.Data))
	for k, v := range s.Data {
		data[k] = bytes.Clone(v)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       namespace,
			Name:            SecretName(workspace, runID, op),
			Labels:          Labels(workspace, runID, op),
			Annotations:     maps.Clone(s.Annotations),
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Type:      SecretType,
		Immutable: new(true),
		Data:      data,
	}, nil
}

// Contents is what an output Secret holds, uncompressed.
type Contents struct {
	// PlanText and Log as the runner printed them (see runner.ReadOutput).
	PlanText, Log string
	// PlanTruncated and LogTruncated say they were cut at their caps.
	PlanTruncated, LogTruncated bool
	// OutputBytes is the size of the whole output.
	OutputBytes int64
	// Unavailable says why the output was not kept; the rest is then empty.
	Unavailable string
}

// Read returns what an output Secret holds, or an error when it is not one or is corrupt.
func Read(s *corev1.Secret) (Contents, error) {
	if s.Type != SecretType {
		return Contents{}, fmt.Errorf("secret %s/%s is of type %q, not %q", s.Namespace, s.Name, s.Type, SecretType)
	}
	c := Contents{
		Unavailable:   s.Annotations[AnnotationUnavailable],
		LogTruncated:  s.Annotations[AnnotationLogTruncated] == "true",
		PlanTruncated: s.Annotations[AnnotationPlanTruncated] == "true",
	}
	c.OutputBytes, _ = strconv.ParseInt(s.Annotations[AnnotationOutputBytes], 10, 64)
	var err error
	if c.Log, err = decompress(s.Data[KeyLog]); err != nil {
		return Contents{}, fmt.Errorf("secret %s/%s: %s: %w", s.Namespace, s.Name, KeyLog, err)
	}
	if c.PlanText, err = decompress(s.Data[KeyPlan]); err != nil {
		return Contents{}, fmt.Errorf("secret %s/%s: %s: %w", s.Namespace, s.Name, KeyPlan, err)
	}
	return c, nil
}

// maxDecompressed bounds what Read inflates, well above the runner's caps.
const maxDecompressed = 4 << 20

func compress(s string) ([]byte, error) {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := io.WriteString(w, s); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func decompress(b []byte) (string, error) {
	if len(b) == 0 {
		return "", nil
	}
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	out, err := io.ReadAll(io.LimitReader(r, maxDecompressed+1))
	if err != nil {
		return "", err
	}
	if len(out) > maxDecompressed {
		return "", fmt.Errorf("more than %d bytes uncompressed", maxDecompressed)
	}
	return string(out), nil
}

// ErrNotRecorded is returned by ReadOperation when the run's record names no output for the
// operation.
var ErrNotRecorded = errors.New("the run's record names no output Secret for the operation")

// ReadOperation reads, with r, what the run record of runID in ws's status keeps of operation
// op: its output Secret, in ws's namespace (ErrNotRecorded when the record names none).
func ReadOperation(ctx context.Context, r client.Reader, ws *magosv1.Workspace, runID string, op runner.Operation) (Contents, error) {
	for _, rec := range ws.Status.Runs {
		if rec.RunID != runID {
			continue
		}
		for _, o := range rec.Operations {
			if o.Operation != string(op) || o.OutputSecret == "" {
				continue
			}
			s := &corev1.Secret{}
			if err := r.Get(ctx, client.ObjectKey{Namespace: ws.Namespace, Name: o.OutputSecret}, s); err != nil {
				return Contents{}, fmt.Errorf("reading the output Secret %s of the %s of run %s: %w", o.OutputSecret, op, runID, err)
			}
			return Read(s)
		}
	}
	return Contents{}, fmt.Errorf("run %s of %s/%s, %s: %w", runID, ws.Namespace, ws.Name, op, ErrNotRecorded)
}
