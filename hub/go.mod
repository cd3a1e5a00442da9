module github.com/magosfleet/magos/hub

go 1.26.3

require (
	github.com/magosfleet/magos/apis v0.0.0
	k8s.io/api v0.36.3
	k8s.io/apimachinery v0.36.3
	k8s.io/client-go v0.36.3
	sigs.k8s.io/controller-runtime v0.24.1
)

replace github.com/magosfleet/magos/apis => ../apis

require github.com/magosfleet/magos/pkg v0.0.0

replace github.com/magosfleet/magos/pkg => ../pkg
