module github.com/magosfleet/magos/agent

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

require (
	dario.cat/mergo v1.0.0 // indirect
	github.com/Microsoft/go-winio v0.6.2 // indirect
	github.com/ProtonMail/go-crypto v1.1.6 // indirect
	github.com/cloudflare/circl v1.6.3 // indirect
	github.com/cyphar/filepath-securejoin v0.6.1 // indirect
	github.com/emirpasic/gods v1.18.1 // indirect
	github.com/go-git/gcfg v1.5.1-0.20230307220236-3a3c6141e376 // indirect
	github.com/go-git/go-billy/v5 v5.9.2 // indirect
	github.com/go-git/go-git/v5 v5.19.3 // indirect
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/golang/groupcache v0.0.0-20241129210726-2c02b8208cf8 // indirect
	github.com/jbenet/go-context v0.0.0-20150711004518-d14ea06fba99 // indirect
	github.com/kevinburke/ssh_config v1.2.0 // indirect
	github.com/magosfleet/magos/hub v0.0.0
	github.com/pjbgf/sha1cd v0.7.0 // indirect
	github.com/prometheus/client_golang v1.23.2 // indirect
	github.com/sergi/go-diff v1.3.2-0.20230802210424-5b0b94c5c0d3 // indirect
	github.com/skeema/knownhosts v1.3.1 // indirect
	github.com/spf13/pflag v1.1.0 // indirect
	github.com/xanzy/ssh-agent v0.3.3 // indirect
	golang.org/x/crypto v0.56.0 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	gopkg.in/warnings.v0 v0.1.2 // indirect
	k8s.io/utils v0.0.0-20260319190234-28399d86e0b5 // indirect
)

replace github.com/magosfleet/magos/pkg => ../pkg

replace github.com/magosfleet/magos/hub => ../hub
