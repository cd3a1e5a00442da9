package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// AsMeta returns the selector as a metav1.LabelSelector. A nil selector gives nil.
func (s *LabelSelector) AsMeta() *metav1.LabelSelector {
	if s == nil {
		return nil
	}
	out := &metav1.LabelSelector{}
	if s.MatchLabels != nil {
		out.MatchLabels = make(map[string]string, len(s.MatchLabels))
		for k, v := range s.MatchLabels {
			out.MatchLabels[k] = string(v)
		}
	}
	for _, r := range s.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: r.Key, Operator: r.Operator, Values: r.Values,
		})
	}
	return out
}

// AsSelector parses the selector. A nil selector matches nothing; an empty one matches
// everything.
func (s *LabelSelector) AsSelector() (labels.Selector, error) {
	if s == nil {
		return labels.Nothing(), nil
	}
	return metav1.LabelSelectorAsSelector(s.AsMeta())
}

// MatchLabels builds a selector that matches the given labels exactly.
func MatchLabels(kv map[string]string) LabelSelector {
	out := LabelSelector{MatchLabels: make(map[string]LabelValue, len(kv))}
	for k, v := range kv {
		out.MatchLabels[k] = LabelValue(v)
	}
	return out
}
