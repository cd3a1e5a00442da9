package fleetview

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// ReadyCondition is the Ready condition for a status phase: True when the object settled well
// (Applied, Ready), False when it failed, Unknown while work goes on.
func ReadyCondition(phase magosv1.Phase, reason, message string, generation int64) metav1.Condition {
	status := metav1.ConditionUnknown
	switch phase {
	case magosv1.PhaseApplied, magosv1.PhaseReady:
		status = metav1.ConditionTrue
	case magosv1.PhaseFailed:
		status = metav1.ConditionFalse
	}
	if reason == "" {
		reason = string(status)
	}
	return metav1.Condition{
		Type: magosv1.ConditionReady, Status: status, Reason: reason, Message: message,
		ObservedGeneration: generation,
	}
}
