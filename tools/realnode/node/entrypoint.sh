#!/bin/bash
# The entrypoint of a magos-node container: a whole single-node Kubernetes cluster, the way a
# kind node is one, built from the binaries of this image. It makes the cluster's certificates
# for the container's own address, then starts and watches etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, containerd, kubelet and kube-proxy. If one of them
# exits, the container exits: a node that lost a part is not a node.
#
# Inside: /etc/kubernetes/admin.conf is the admin kubeconfig (server https://<address>:6443),
# /var/log/magos-node/<part>.log the logs, /run/magos-node/ready is written once the Node is
# Ready. Settings come from the environment:
#   MAGOS_NODE_POD_CIDR      the Pods' subnet (default 10.244.0.0/24)
#   MAGOS_NODE_SERVICE_CIDR  the Services' subnet (default 10.96.0.0/16)
#   MAGOS_NODE_CGROUP_ROOT   kubelet's cgroup root, one per node (default /magos-<hostname>)
set -euo pipefail

NODE=$(hostname)
ADDR=$(ip -4 -o addr show dev eth0 | awk '{split($4, a, "/"); print a[1]; exit}')
POD_CIDR=${MAGOS_NODE_POD_CIDR:-10.244.0.0/24}
SERVICE_CIDR=${MAGOS_NODE_SERVICE_CIDR:-10.96.0.0/16}
SERVICE_BASE=${SERVICE_CIDR%/*}
SERVICE_IP=${SERVICE_BASE%.*}.1 # the kubernetes Service: the first address of a /16 or /24
CGROUP_ROOT=${MAGOS_NODE_CGROUP_ROOT:-/magos-$NODE}
PKI=/etc/kubernetes/pki
LOGS=/var/log/magos-node
mkdir -p "$PKI" "$LOGS" /run/magos-node /var/lib/etcd /etc/containerd /etc/cni/net.d /var/lib/kubelet

log() { printf '[%s] %s\n' "$(date -u +%T)" "$*"; }

# Mounts made by kubelet (volumes) must propagate into the containers.
mount --make-rshared /

# kubelet's cgroup root must exist in every cgroup v1 hierarchy; a new cpuset cgroup starts with
# no CPUs and memory nodes, so give it its parent's.
for hierarchy in /sys/fs/cgroup/*/; do
  [[ $hierarchy == */unified/ ]] || mkdir -p "$hierarchy${CGROUP_ROOT#/}"
done
if [[ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]]; then
  cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset$CGROUP_ROOT/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset$CGROUP_ROOT/cpuset.mems"
fi

# --- certificates ------------------------------------------------------------------------------
cert() { # cert NAME SUBJECT [SANS]: a key and a certificate signed by the cluster's CA.
  local name=$1 subj=$2 sans=${3:-} ext
  ext=$(mktemp)
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n' >"$ext"
  [[ -n $sans ]] && printf 'subjectAltName=%s\n' "$sans" >>"$ext"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 30 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$ext"
}
kubeconfig() { # kubeconfig FILE CERT: a kubeconfig for the client certificate CERT.
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $NODE
  cluster:
    server: https://$ADDR:6443
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/$2.crt")
    client-key-data: $(base64 -w0 <"$PKI/$2.key")
contexts:
- name: $NODE
  context: {cluster: $NODE, user: $2}
current-context: $NODE
EOF
}
if [[ ! -f $PKI/ca.crt ]]; then
  log "certificates for $NODE at $ADDR"
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -subj "/CN=magos-node-ca-$NODE" \
    -days 30 -out "$PKI/ca.crt" 2>/dev/null
  cert apiserver "/CN=kube-apiserver" \
    "IP:$ADDR,IP:$SERVICE_IP,IP:127.0.0.1,DNS:$NODE,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin "/O=system:masters/CN=kubernetes-admin"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  cert controller-manager "/CN=system:kube-controller-manager"
  cert scheduler "/CN=system:kube-scheduler"
  cert kube-proxy "/CN=system:kube-proxy"
  cert kubelet "/O=system:nodes/CN=system:node:$NODE" "IP:$ADDR,DNS:$NODE"
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  for c in admin controller-manager scheduler kube-proxy kubelet; do kubeconfig "/etc/kubernetes/$c.conf" "$c"; done
fi

# --- the parts -----------------------------------------------------------------------------
declare -A PIDS
start() { # start NAME COMMAND...: run a part in the background, its output in its log.
  local name=$1
  shift
  "$@" >"$LOGS/$name.log" 2>&1 &
  PIDS[$name]=$!
  log "started $name (pid $!)"
}
stop_all() {
  # The reverse of the start order; kube-apiserver before etcd.
  for name in kube-proxy kubelet containerd kube-scheduler kube-controller-manager kube-apiserver etcd; do
    [[ -n ${PIDS[$name]:-} ]] && kill "${PIDS[$name]}" 2>/dev/null && wait "${PIDS[$name]}" 2>/dev/null || true
  done
}
trap 'stop_all; exit 0' TERM INT

start etcd etcd --data-dir /var/lib/etcd --listen-client-urls http://127.0.0.1:2379 \
  --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
  --unsafe-no-fsync --quota-backend-bytes 2147483648

start kube-apiserver kube-apiserver --etcd-servers http://127.0.0.1:2379 \
  --advertise-address "$ADDR" --bind-address 0.0.0.0 --secure-port 6443 \
  --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
  --client-ca-file "$PKI/ca.crt" --authorization-mode Node,RBAC --allow-privileged \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --service-account-issuer "https://kubernetes.default.svc" --service-account-key-file "$PKI/sa.pub" \
  --service-account-signing-key-file "$PKI/sa.key" --api-audiences "https://kubernetes.default.svc" \
  --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types InternalIP --enable-admission-plugins NodeRestriction

until kubectl --kubeconfig /etc/kubernetes/admin.conf get --raw /readyz >/dev/null 2>&1; do
  [[ -d /proc/${PIDS[kube-apiserver]} ]] || { log "kube-apiserver exited"; tail -20 "$LOGS/kube-apiserver.log"; exit 1; }
  sleep 0.2
done
log "kube-apiserver ready"

start kube-controller-manager kube-controller-manager --kubeconfig /etc/kubernetes/controller-manager.conf \
  --authentication-kubeconfig /etc/kubernetes/controller-manager.conf \
  --authorization-kubeconfig /etc/kubernetes/controller-manager.conf \
  --root-ca-file "$PKI/ca.crt" --service-account-private-key-file "$PKI/sa.key" \
  --use-service-account-credentials --cluster-signing-cert-file "$PKI/ca.crt" \
  --cluster-signing-key-file "$PKI/ca.key" --leader-elect=false --bind-address 127.0.0.1

start kube-scheduler kube-scheduler --kubeconfig /etc/kubernetes/scheduler.conf \
  --authentication-kubeconfig /etc/kubernetes/scheduler.conf \
  --authorization-kubeconfig /etc/kubernetes/scheduler.conf --leader-elect=false --bind-address 127.0.0.1

# containerd: runc as the runtime, cgroupfs, the locally built pause image as the sandbox, and
# no change to oom_score_adj (the machines lack CAP_SYS_RESOURCE).
cat >/etc/containerd/config.toml <<EOF
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "magos.local/pause:1"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/local/bin/runc"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/opt/cni/bin"]
    conf_dir = "/etc/cni/net.d"
EOF
cat >/etc/cni/net.d/10-bridge.conflist <<EOF
{
  "cniVersion": "1.0.0",
  "name": "magos-node",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
start containerd containerd --config /etc/containerd/config.toml
until ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1; do sleep 0.2; done
# Every image the node runs is loaded from /images (the pause image first).
for tar in /images/*.tar; do
  [[ -f $tar ]] || continue
  ctr --address /run/containerd/containerd.sock -n k8s.io images import --local "$tar" >>"$LOGS/images.log" 2>&1 ||
    { log "importing $tar failed"; tail -5 "$LOGS/images.log"; exit 1; }
done
log "containerd ready, images loaded"

cat >/var/lib/kubelet/config.yaml <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
failSwapOn: false
resolvConf: /etc/resolv.conf
podCIDR: $POD_CIDR
serializeImagePulls: false
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
localStorageCapacityIsolation: false
EOF
start kubelet kubelet --config /var/lib/kubelet/config.yaml --kubeconfig /etc/kubernetes/kubelet.conf \
  --node-ip "$ADDR" --hostname-override "$NODE" --root-dir /var/lib/kubelet --cert-dir "$PKI/kubelet-certs"

cat >/var/lib/kube-proxy.yaml <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: /etc/kubernetes/kube-proxy.conf}
clusterCIDR: $POD_CIDR
conntrack: {maxPerCore: 0}
EOF
start kube-proxy kube-proxy --config /var/lib/kube-proxy.yaml --hostname-override "$NODE"

# Ready once the Node says so and the default ServiceAccount exists (Pods need it).
K="kubectl --kubeconfig /etc/kubernetes/admin.conf"
until [[ $($K get node "$NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]] &&
  $K -n default get serviceaccount default >/dev/null 2>&1; do
  for name in "${!PIDS[@]}"; do
    [[ -d /proc/${PIDS[$name]} ]] || { log "$name exited"; tail -30 "$LOGS/$name.log"; exit 1; }
  done
  sleep 0.5
done
touch /run/magos-node/ready
log "node $NODE ready at $ADDR"

# Watch: the first part to exit ends the node.
set +e
wait -n "${PIDS[@]}"
rc=$?
for name in "${!PIDS[@]}"; do
  [[ -d /proc/${PIDS[$name]} ]] || { log "$name exited ($rc)"; tail -30 "$LOGS/$name.log"; }
done
stop_all
exit 1
