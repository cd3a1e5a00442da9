package hubsync

import "k8s.io/apimachinery/pkg/types"

// WithStatusFault makes the hub sync of opts ask fault before each mirror status write; an
// error fails that write as a hub refusing it would (a test fault).
func WithStatusFault(opts *Options, fault func(origin types.NamespacedName) error) {
	opts.statusFault = fault
}
