// Package scheme builds the scheme every Magos binary, tool and test uses: the Kubernetes
// built-in kinds and the Magos kinds.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// New returns a new scheme with the Kubernetes built-in kinds and the Magos kinds.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := magosv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}
