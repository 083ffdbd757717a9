#!/usr/bin/env bash
# A one-node Kubernetes on this machine, in a network namespace of its own:
#
#   scripts/k8s-node.sh up       start it (as root), import the images, print how to reach it
#   scripts/k8s-node.sh down     stop it, leaving no process, mount, interface or chain
#   scripts/k8s-node.sh env      the variables to reach it: eval "$(scripts/k8s-node.sh env)"
#   scripts/k8s-node.sh status   whether it runs, and its node and pods
#   scripts/k8s-node.sh images   import the images podman has rebuilt into the running node
#                                (then `kubectl rollout restart deployment` to use them)
#
# The node: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy (iptables) and CoreDNS (scripts/build-k8s.sh builds them with Go), with
# Debian's containerd, runc and CNI plugins (bridge, host-local, portmap; installed here
# when missing). Every one of them runs in one network and mount namespace, made for the
# node and held by a process of its own: the node's address is $NODE_IP on a veth pair
# with the host ($HOST_IP), its pods are on the bridge cni0 (10.244.0.0/24), and the host
# routes the pods' and Services' addresses (10.244.0.0/16, 10.96.0.0/16) to the node. So
# the node's iptables chains, bridge and mounts are its own, and go with it.
#
# The pods' and daemons' processes are in the cgroup /socialbench-k8s (the kubelet's
# cgroupRoot, cgroupfs driver); `down` kills every process there, then the namespaces'
# holder, which takes the namespaces, and with them every chain, interface and mount.
#
# Images cannot be pulled here: the socialbench image, the stand-ins of the stores and
# nginx (compose/standins.env) and a pause image built from scripts/k8s/pause.c are
# saved from podman (scripts/build-images.sh builds them) and imported into containerd,
# whose image store (/var/lib/socialbench-k8s/containerd) is kept between runs; an image
# whose podman id has not changed is not imported again. `up` writes a values file for
# the chart naming them ($RUN/values.yaml); everything else is the chart's defaults.
# The stores' persistence (stores.*.persistence.enabled) binds static hostPath volumes of
# the default StorageClass `local` ($LIB/volumes, removed by `down` with the cluster):
#
#   eval "$(scripts/k8s-node.sh env)"
#   helm install sn helm/socialnetwork -f "$SOCIALBENCH_K8S_VALUES"
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh

NAME=socialbench-k8s
RUN=/run/$NAME                    # sockets, certificates, logs: gone with `down`
LIB=/var/lib/$NAME                # containerd's image store (kept), kubelet's pods (removed)
CGROUP=/$NAME
HOST_IP=10.250.0.1
NODE_IP=10.250.0.2
NODE_NAME=socialbench-node
POD_CIDR=10.244.0.0/16
NODE_POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
API_PORT=6443
PAUSE_IMAGE=localhost/socialbench/pause:1
SETUP_LOG=$RUN/setup.log
NODE_TMPFS="/run/containerd /run/netns"

bin=$(go env GOBIN 2>/dev/null || true); bin=${bin:-$(go env GOPATH 2>/dev/null || echo ~/go)/bin}
python=.venv/bin/python

usage() { echo "usage: $0 up|down|env|status|images" >&2; exit 2; }
die() { echo "error: $*" >&2; exit 1; }
step() { echo "==> $* ($((SECONDS - started)) s)"; }
started=$SECONDS

holder_pid() { cat "$RUN/holder.pid" 2>/dev/null || true; }
running() { local pid; pid=$(holder_pid); [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }
# Run a command in the node's namespaces and cgroup.
in_node() {
  sh -c 'echo $$ >"$0" && exec "$@"' "/sys/fs/cgroup/pids$CGROUP/cgroup.procs" \
    nsenter --target "$(holder_pid)" --net --mount -- "$@"
}

print_env() {
  echo "export KUBECONFIG=$RUN/kubeconfig"
  echo "export SOCIALBENCH_K8S_VALUES=$RUN/values.yaml"
  echo "export SOCIALBENCH_K8S_NODE_IP=$NODE_IP"
  echo "export PATH=\"$bin:\$PATH\""
}

# --- down ---------------------------------------------------------------------------

cgroup_dirs() {  # every cgroup directory of the node, deepest first
  local root
  for root in /sys/fs/cgroup/*/; do
    [ -d "$root$NAME" ] && find "$root$NAME" -depth -type d
  done
  return 0
}

kill_cgroup() {  # every process in the node's cgroups, until none is left
  local round pids
  for round in $(seq 1 50); do
    [ -d "/sys/fs/cgroup/pids/$NAME" ] || return 0
    pids=$(find "/sys/fs/cgroup/pids/$NAME" -name cgroup.procs -exec cat {} + | sort -u)
    [ -z "$pids" ] && return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  echo "warning: processes left in /sys/fs/cgroup/pids/$NAME: $pids" >&2
}

# The kubelet sets these (its kernel tunables) for the whole machine: `up` keeps their
# values and `down` puts them back.
KERNEL_TUNABLES=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
                 kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

down() {
  local holder dir
  holder=$(holder_pid)
  kill_cgroup
  if [ -n "$holder" ]; then kill -KILL "$holder" 2>/dev/null || true; fi
  while read -r dir; do [ -n "$dir" ] && rmdir "$dir" 2>/dev/null || true; done < <(cgroup_dirs)
  for dir in $NODE_TMPFS; do  # the mount points `up` made on the host
    if [ -f "$RUN/made-$(basename "$dir")" ]; then rmdir "$dir" 2>/dev/null || true; fi
  done
  ip link del "$NAME" 2>/dev/null || true
  if [ -f "$LIB/kernel-tunables" ]; then
    sysctl -q -p "$LIB/kernel-tunables" >/dev/null || true
    rm -f "$LIB/kernel-tunables"
  fi
  rm -rf "$RUN" "$LIB/kubelet" "$LIB/pods" "$LIB/volumes"
  local left
  left=$(cgroup_dirs | head -n 3)
  [ -z "$left" ] || echo "warning: cgroups left: $left" >&2
  echo "stopped; nothing of $NAME runs"
}

# --- up -----------------------------------------------------------------------------

need_packages() {
  local missing=() package
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v nsenter >/dev/null || missing+=(util-linux)
  command -v conntrack >/dev/null || missing+=(conntrack)
  command -v gcc >/dev/null || missing+=(gcc libc6-dev)
  if [ ${#missing[@]} -gt 0 ]; then
    quietly "apt-get install ${missing[*]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends "${missing[@]}"
  fi
  for package in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy \
                 kubectl coredns; do
    [ -x "$bin/$package" ] || die "$bin/$package is missing: run scripts/build-k8s.sh"
  done
  command -v podman >/dev/null || die "podman is missing: run scripts/setup.sh"
  [ -x "$python" ] || die "$python is missing: run scripts/setup.sh"
}

certificates() {
  (
    cd "$RUN/pki"
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -keyout ca.key -out ca.crt \
      -subj "/CN=$NAME-ca" -addext basicConstraints=critical,CA:TRUE \
      -addext keyUsage=critical,keyCertSign,cRLSign
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
      -subj /CN=kube-apiserver
    printf 'subjectAltName=IP:%s,IP:10.96.0.1,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,%s\n' \
      "$NODE_IP" "DNS:kubernetes.default,DNS:kubernetes.default.svc" >san.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
      -extfile san.ext -out apiserver.crt
    openssl genrsa -out sa.key 2048
    openssl rsa -in sa.key -pubout -out sa.pub
  ) >>"$SETUP_LOG" 2>&1
  local token
  token=$(openssl rand -hex 24)
  echo "$token,admin,admin,system:masters" >"$RUN/pki/tokens.csv"
  cat >"$RUN/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: $NAME
    cluster: {server: "https://$NODE_IP:$API_PORT", certificate-authority: "$RUN/pki/ca.crt"}
users:
  - name: admin
    user: {token: "$token"}
contexts:
  - name: $NAME
    context: {cluster: $NAME, user: admin, namespace: default}
current-context: $NAME
EOF
}

namespaces() {  # the holder of the node's network and mount namespaces, and the veth pair
  # The kubelet's cgroupRoot must exist in every hierarchy (cgroup v1); a new cpuset
  # cgroup has no CPUs or memory nodes until given its parent's.
  local root
  for root in /sys/fs/cgroup/*/; do
    [ "$root" = /sys/fs/cgroup/unified/ ] || mkdir -p "$root$NAME"
  done
  cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset$CGROUP/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset$CGROUP/cpuset.mems"
  # --propagation private: the node's mounts (overlays, volumes, network namespaces) are
  # seen by it alone and go with it.
  setsid unshare --net --mount --propagation private sleep infinity </dev/null >/dev/null 2>&1 &
  local holder=$!
  echo "$holder" >"/sys/fs/cgroup/pids$CGROUP/cgroup.procs"
  echo "$holder" >"$RUN/holder.pid"
  sleep 0.2
  ip link add "$NAME" type veth peer name eth0 netns "/proc/$holder/ns/net"
  ip addr add "$HOST_IP/24" dev "$NAME"
  ip link set "$NAME" up
  in_node ip link set lo up
  in_node ip addr add "$NODE_IP/24" dev eth0
  in_node ip link set eth0 up
  in_node ip route add default via "$HOST_IP"
  ip route add "$POD_CIDR" via "$NODE_IP"
  ip route add "$SERVICE_CIDR" via "$NODE_IP"
  in_node sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
  # The node sees its own interfaces under /sys/class/net (kubelet, CNI): a sysfs of its
  # network namespace over the host's net directories, keeping /sys/fs/cgroup.
  in_node bash -c "mkdir -p $RUN/sysfs && mount -t sysfs sysfs $RUN/sysfs &&
    mount --bind $RUN/sysfs/class/net /sys/class/net &&
    mount --bind $RUN/sysfs/devices/virtual/net /sys/devices/virtual/net"
  # What containerd, its shims, runc and the CNI plugins keep at fixed paths (shim
  # sockets, runc's state, the pods' network namespaces): on the node's own tmpfs.
  local dir
  for dir in $NODE_TMPFS; do
    [ -d "$dir" ] || { mkdir -p "$dir"; touch "$RUN/made-$(basename "$dir")"; }
    in_node mount -t tmpfs -o mode=0711 "$NAME" "$dir"
  done
}

start() {  # NAME COMMAND...: in the node's namespaces and cgroup, logged in $RUN/logs/NAME.log
  local name=$1; shift
  in_node setsid "$@" </dev/null >"$RUN/logs/$name.log" 2>&1 &
  echo $! >"$RUN/$name.pid"
}

wait_for() {  # WHAT SECONDS COMMAND...
  local what=$1 seconds=$2; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "error: $what not up within $seconds s; the end of its log:" >&2
      tail -n 30 "$RUN/logs/$what.log" >&2 2>/dev/null || true
      exit 1
    fi
    sleep 1
  done
}

control_plane() {
  start etcd "$bin/etcd" --name "$NAME" --data-dir "$RUN/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster "$NAME=http://127.0.0.1:2380" --unsafe-no-fsync
  wait_for etcd 60 in_node curl -sf http://127.0.0.1:2379/health
  start kube-apiserver "$bin/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
    --bind-address 0.0.0.0 --secure-port "$API_PORT" --advertise-address "$NODE_IP" \
    --cert-dir "$RUN/pki/apiserver" \
    --tls-cert-file "$RUN/pki/apiserver.crt" --tls-private-key-file "$RUN/pki/apiserver.key" \
    --client-ca-file "$RUN/pki/ca.crt" --token-auth-file "$RUN/pki/tokens.csv" \
    --authorization-mode AlwaysAllow \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$RUN/pki/sa.pub" \
    --service-account-signing-key-file "$RUN/pki/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" --service-node-port-range 30000-32767 \
    --kubelet-preferred-address-types InternalIP
  wait_for kube-apiserver 180 "$bin/kubectl" get --raw /readyz
  start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$RUN/kubeconfig" \
    --authentication-kubeconfig "$RUN/kubeconfig" --authorization-kubeconfig "$RUN/kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
    --service-account-private-key-file "$RUN/pki/sa.key" --root-ca-file "$RUN/pki/ca.crt" \
    --cluster-cidr "$POD_CIDR" --service-cluster-ip-range "$SERVICE_CIDR"
  start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$RUN/kubeconfig" \
    --authentication-kubeconfig "$RUN/kubeconfig" --authorization-kubeconfig "$RUN/kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false
}

container_runtime() {
  mkdir -p "$LIB/containerd" "$RUN/cni/net.d" "$RUN/cni/ipam"
  cat >"$RUN/containerd.toml" <<EOF
version = 2
root = "$LIB/containerd"
state = "$RUN/containerd"
[grpc]
  address = "$RUN/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Without CAP_SYS_RESOURCE (as here) no process may lower its oom_score_adj, and the
  # kubelet asks -998 for every sandbox: keep each at containerd's own instead.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$RUN/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
[plugins."io.containerd.internal.v1.opt"]
  path = "$LIB/opt"
EOF
  cat >"$RUN/cni/net.d/10-$NAME.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$NAME",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
     "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$RUN/cni/ipam",
              "ranges": [[{"subnet": "$NODE_POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  start containerd containerd --config "$RUN/containerd.toml"
  wait_for containerd 60 ctr --address "$RUN/containerd.sock" version
}

import_images() {  # every image the chart runs here, from podman into containerd's k8s.io
  local pause_dir=$RUN/pause
  mkdir -p "$pause_dir"
  gcc -static -Os -o "$pause_dir/pause" scripts/k8s/pause.c
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' \
    >"$pause_dir/Containerfile"
  quietly "podman build $PAUSE_IMAGE" podman build -q -t "$PAUSE_IMAGE" "$pause_dir"
  local images=("$PAUSE_IMAGE" localhost/socialbench:dev) image id stamp
  # shellcheck disable=SC1091
  images+=($(set -a; . compose/standins.env; env | sed -n 's/^SOCIALBENCH_[A-Z]*_IMAGE=//p'))
  mkdir -p "$LIB/imported"
  for image in "${images[@]}"; do
    id=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null) ||
      die "podman has no image $image: run scripts/build-images.sh"
    stamp=$LIB/imported/$(echo "$image" | tr '/:' '__')
    if [ "$(cat "$stamp" 2>/dev/null)" = "$id" ] &&
       ctr --address "$RUN/containerd.sock" -n k8s.io images ls -q | grep -qxF "$image"; then
      continue
    fi
    quietly "import $image" bash -c "podman save '$image' |
      ctr --address '$RUN/containerd.sock' -n k8s.io images import -"
    echo "$id" >"$stamp"
  done
}

node_agents() {
  mkdir -p "$LIB/kubelet" "$LIB/pods" "$RUN/coredns"
  cat >"$RUN/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
  x509: {clientCAFile: "$RUN/pki/ca.crt"}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP
clusterDNS: [$NODE_IP]
clusterDomain: cluster.local
containerRuntimeEndpoint: unix://$RUN/containerd.sock
failSwapOn: false
failCgroupV1: false
podLogsDir: $LIB/pods
# The images were imported, never pulled: the kubelet must not collect them as garbage.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 200Mi, nodefs.available: 1%, imagefs.available: 1%}
serializeImagePulls: false
resolvConf: "$RUN/coredns/host-resolv.conf"
EOF
  # Pods of dnsPolicy Default get the host's resolver, which the node cannot reach:
  # the cluster's DNS then, as for every other pod.
  echo "nameserver $NODE_IP" >"$RUN/coredns/host-resolv.conf"
  start kubelet "$bin/kubelet" --config "$RUN/kubelet.yaml" --kubeconfig "$RUN/kubeconfig" \
    --root-dir "$LIB/kubelet" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" \
    --cert-dir "$RUN/pki/kubelet"
  cat >"$RUN/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$RUN/kubeconfig"}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_CIDR
# Leave the host's conntrack table size and timeouts as they are.
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  start kube-proxy "$bin/kube-proxy" --config "$RUN/kube-proxy.yaml"
  cat >"$RUN/coredns/Corefile" <<EOF
.:53 {
    bind $NODE_IP
    errors
    health 127.0.0.1:8081
    ready 127.0.0.1:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $RUN/kubeconfig $NAME
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
    loadbalance
}
EOF
  start coredns "$bin/coredns" -conf "$RUN/coredns/Corefile"
  wait_for coredns 60 in_node curl -sf http://127.0.0.1:8181/ready
  wait_for kubelet 120 "$bin/kubectl" wait --for=condition=Ready "node/$NODE_NAME" --timeout=5s
}

VOLUMES=8                         # hostPath PersistentVolumes, $LIB/volumes/pv-<i>
VOLUME_SIZE=50Gi

storage() {  # a default StorageClass of static hostPath volumes: the stores' persistence
  local i manifest
  manifest="apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
  annotations: {storageclass.kubernetes.io/is-default-class: \"true\"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer"
  for i in $(seq 1 $VOLUMES); do
    # 0777: the stores' images run as users of their own, and fsGroup does not apply to
    # hostPath volumes.
    mkdir -p "$LIB/volumes/pv-$i" && chmod 0777 "$LIB/volumes/pv-$i"
    manifest+="
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-$i}
spec:
  capacity: {storage: $VOLUME_SIZE}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: local
  hostPath: {path: $LIB/volumes/pv-$i, type: Directory}"
  done
  echo "$manifest" | "$bin/kubectl" apply -f - >>"$SETUP_LOG"
}

values() {  # the chart's values for this node: the imported images, the front end on a NodePort
  local mongodb redis memcached nginx
  # shellcheck disable=SC1091
  eval "$(set -a; . compose/standins.env; env | grep '^SOCIALBENCH_[A-Z]*_IMAGE=' |
          sed 's/^SOCIALBENCH_\([A-Z]*\)_IMAGE=/\L\1=/')"
  cat >"$RUN/values.yaml" <<EOF
# Written by scripts/k8s-node.sh: the images imported into this node's containerd
# (never pulled), the front end on a NodePort of $NODE_IP, and the stores' CPU requests
# lowered so that the default per-service layout's 11 instances fit this 2-CPU node
# beside the services (0.45 CPUs instead of 1.7; shared: 0.09). The rest: the defaults.
image: {repository: localhost/socialbench, tag: dev, pullPolicy: Never}
gateway:
  image: $nginx
  service: {type: NodePort}
stores:
  mongodb: {image: $mongodb, resources: {requests: {cpu: 50m}}}
  redis: {image: $redis, resources: {requests: {cpu: 30m}}}
  memcached: {image: $memcached, resources: {requests: {cpu: 30m}}}
EOF
}

up() {
  [ "$(id -u)" = 0 ] || die "the node needs root (namespaces, cgroups, iptables)"
  if running; then echo "already running"; print_env; exit 0; fi
  down >/dev/null
  mkdir -p "$RUN/logs" "$RUN/pki" "$LIB"
  sysctl "${KERNEL_TUNABLES[@]}" | sed 's/ = /=/' >"$LIB/kernel-tunables"
  step "packages and binaries"
  need_packages
  export KUBECONFIG=$RUN/kubeconfig PATH="$bin:$PATH"
  step "certificates; the node's namespaces ($NODE_IP, veth $NAME)"
  certificates
  namespaces
  step "etcd, kube-apiserver (https://$NODE_IP:$API_PORT), controller manager, scheduler"
  control_plane
  step "containerd"
  container_runtime
  step "images from podman into containerd"
  import_images
  step "kubelet, kube-proxy, CoreDNS"
  node_agents
  storage
  values
  step "node $NODE_NAME Ready"
  print_env
}

status() {
  if ! running; then echo "not running"; exit 1; fi
  export KUBECONFIG=$RUN/kubeconfig
  "$bin/kubectl" get nodes -o wide
  "$bin/kubectl" get pods -A -o wide
}

images() {
  running || die "the node is not running: scripts/k8s-node.sh up"
  import_images
  echo "imported; pods started from now on run them"
}

case "${1:-}" in
  up) up ;;
  images) images ;;
  down) down ;;
  env) print_env ;;
  status) status ;;
  *) usage ;;
esac
