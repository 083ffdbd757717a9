#!/usr/bin/env bash
# A Kubernetes of one or more nodes on this machine, each in a network namespace of its own:
#
#   scripts/k8s-node.sh up [--nodes N] [--client-node] [--arm64-node] [--stack-cpus LIST]
#                          [--client-cpus LIST]
#                                start it (as root), import the images, print how to reach it
#   scripts/k8s-node.sh down     stop it, leaving no process, mount, interface, chain or cgroup
#   scripts/k8s-node.sh env      the variables to reach it: eval "$(scripts/k8s-node.sh env)"
#   scripts/k8s-node.sh status   whether it runs, and its nodes and pods
#   scripts/k8s-node.sh images   import the images podman has rebuilt into every running node
#                                (then `kubectl rollout restart deployment` to use them)
#   scripts/k8s-node.sh stop-node I    lose node I: kill its kubelet, containerd, containers
#                                and agents and take its network namespace (and so its
#                                network) away, as a machine that lost power
#   scripts/k8s-node.sh start-node I   bring node I back (its images and volumes kept)
#
# The cluster: one control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler) and N nodes (default 1), each a kubelet, kube-proxy (iptables) and
# CoreDNS (scripts/build-k8s.sh builds them with Go) with its own Debian containerd, runc
# and CNI plugins (bridge, host-local, portmap; installed here when missing). Node I runs
# in a network and mount namespace of its own, held by a process of its own: its address
# is 10.250.I.2 on a veth pair with the host (10.250.I.1; the host end is socialbench-k8s
# for node 0, sbk8s-I for the others), its pods on its bridge cni0 in 10.244.I.0/24. The
# control plane runs in node 0's namespaces (the API server at https://10.250.0.2:6443).
# So each node's iptables chains, bridge and mounts are its own, and go with it.
#
# The pod network (a real CNI, no overlay): the CNI bridge plugin on each node (its pods
# on cni0, routed by the node, no masquerade between pods), and the host as the router
# between nodes: the host routes 10.244.I.0/24 to node I's veth and every node's default
# route is the host, so a pod reaches a pod of another node by its own address, through
# the host's forwarding (net.ipv4.ip_forward, turned on by `up` and left on). Chosen
# over flannel because the nodes share one host that is already a router to each of them:
# routes are all a multi-node pod network needs here, with no overlay device, no
# encapsulation and no binary to build; a real cluster's CNI does the same job over a
# network. The Services' 10.96.0.0/16 are routed by the host to node 0, and every node's
# kube-proxy translates them in its own namespace.
#
# A client node (--client-node, one more node, `socialbench-client`) runs what drives
# the stack, not the stack: it is labelled socialbench.io/role=client and tainted
# socialbench.io/role=client:NoSchedule, so only pods that tolerate it and ask for it
# (the chart's load.nodeSelector and load.tolerations) run there. With it, the nodes get
# CPUs of their own (a cpuset for each node's cgroup: daemons and pods): the client the
# last CPU, the stack's nodes the others (--client-cpus, --stack-cpus; default: all CPUs
# for every node). Each node carries its CPUs in the annotation socialbench.io/cpus.
#
# An arm64 node (--arm64-node: the last stack node) runs a kubelet built for arm64
# (scripts/build-k8s.sh --arm64-kubelet) under QEMU, so it says kubernetes.io/arch=arm64
# (an amd64 kubelet puts amd64 back over --node-labels at every status update), and has
# the arm64 variants of the images (podman's <image>-arm64, scripts/containers/arm64.sh)
# under the images' own names, which its containerd (amd64) runs by QEMU through
# binfmt_misc (Debian's qemu-user-static; the pause image stays amd64). docs/deploy.md,
# "A mixed-arch cluster".
#
# The pods' and daemons' processes are in the cgroup /socialbench-k8s/node-I (node I's
# kubelet's cgroupRoot, cgroupfs driver); `down` kills every process there, then the
# namespaces' holders, which takes the namespaces, and with them every chain, interface
# and mount.
#
# Images cannot be pulled here: the socialbench image, the stand-ins of the stores and
# nginx (compose/standins.env) and a pause image built from scripts/k8s/pause.c are
# saved from podman (scripts/build-images.sh builds them) and imported into each node's
# containerd, whose image store ($LIB/node-I/containerd) is kept between runs; an image
# whose podman id has not changed is not imported again. `up` writes a values file for
# the chart naming them ($RUN/values.yaml); everything else is the chart's defaults.
# The stores' claims (the chart's default: stores.*.persistence) bind static local volumes
# of the default StorageClass `local`, 24 on each of the stack's nodes
# ($LIB/volumes/node-I, removed by `down` with the cluster), each bound to its node as a
# real node-local disk: a store's pod comes back with its data, on its node.
#
#   eval "$(scripts/k8s-node.sh env)"
#   helm install sn helm/socialnetwork -f "$SOCIALBENCH_K8S_VALUES"
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh

NAME=socialbench-k8s
RUN=/run/$NAME                    # sockets, certificates, logs: gone with `down`
LIB=/var/lib/$NAME                # the nodes' image stores (kept), kubelets' pods (removed)
CGROUP=/$NAME
API_IP=10.250.0.2                 # node 0's address, where the control plane runs
POD_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
API_PORT=6443
PAUSE_IMAGE=localhost/socialbench/pause:1
SETUP_LOG=$RUN/setup.log
NODE_TMPFS="/run/containerd /run/netns"
CLIENT_ROLE=socialbench.io/role
CPUS_ANNOTATION=socialbench.io/cpus
MAX_NODES=16

bin=$(go env GOBIN 2>/dev/null || true); bin=${bin:-$(go env GOPATH 2>/dev/null || echo ~/go)/bin}
python=.venv/bin/python

usage() {
  echo "usage: $0 up [--nodes N] [--client-node] [--arm64-node] [--stack-cpus LIST]" \
       "[--client-cpus LIST]" >&2
  echo "       $0 down|env|status|images|stop-node I|start-node I" >&2
  exit 2
}
die() { echo "error: $*" >&2; exit 1; }
step() { echo "==> $* ($((SECONDS - started)) s)"; }
started=$SECONDS

# The cluster's shape, written by `up` ($RUN/cluster.env): NODES (every node, the client
# included), CLIENT (the client node's index, or empty), and each node's CPUS_<I>.
NODES=1
CLIENT=""
ARM64=""
cluster_shape() { [ -f "$RUN/cluster.env" ] && . "$RUN/cluster.env"; return 0; }

# Node I's names and addresses, as globals (the functions below work on the current node).
node() {
  I=$1
  NODE_RUN=$RUN/node-$I
  NODE_LIB=$LIB/node-$I
  NODE_CGROUP=$CGROUP/node-$I
  HOST_IP=10.250.$I.1
  NODE_IP=10.250.$I.2
  NODE_POD_CIDR=10.244.$I.0/24
  if [ "$I" = 0 ]; then HOST_VETH=$NAME; else HOST_VETH=sbk8s-$I; fi
  if [ "$I" = "$CLIENT" ]; then NODE_NAME=socialbench-client
  elif [ "$I" = 0 ]; then NODE_NAME=socialbench-node
  else NODE_NAME=socialbench-node-$I; fi
}

holder_pid() { cat "$NODE_RUN/holder.pid" 2>/dev/null || true; }
running() { local pid; pid=$(holder_pid); [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }
cluster_running() { node 0; running; }
# Run a command in the current node's namespaces and cgroups (pids: what `down` kills;
# cpuset: the node's CPUs).
in_node() {
  sh -c 'echo $$ >"$0" && echo $$ >"$1" && shift && exec "$@"' \
    "/sys/fs/cgroup/pids$NODE_CGROUP/cgroup.procs" \
    "/sys/fs/cgroup/cpuset$NODE_CGROUP/cgroup.procs" \
    nsenter --target "$(holder_pid)" --net --mount -- "$@"
}

print_env() {
  cluster_shape
  local i ips=()
  for i in $(seq 0 $((NODES - 1))); do node "$i"; ips+=("$NODE_IP"); done
  echo "export KUBECONFIG=$RUN/kubeconfig"
  echo "export SOCIALBENCH_K8S_VALUES=$RUN/values.yaml"
  echo "export SOCIALBENCH_K8S_NODE_IP=$API_IP"
  echo "export SOCIALBENCH_K8S_NODE_IPS=\"${ips[*]}\""
  echo "export PATH=\"$bin:\$PATH\""
}

# --- down ---------------------------------------------------------------------------

cgroup_dirs() {  # every cgroup directory under $1 (default: the cluster's), deepest first
  local root sub=${1:-$CGROUP}
  for root in /sys/fs/cgroup/*/; do
    [ -d "$root${sub#/}" ] && find "$root${sub#/}" -depth -type d
  done
  return 0
}

kill_cgroup() {  # every process in the cgroups under $1 (pids), until none is left
  local round pids dir=/sys/fs/cgroup/pids$1
  for round in $(seq 1 50); do
    [ -d "$dir" ] || return 0
    pids=$(find "$dir" -name cgroup.procs -exec cat {} + | sort -u)
    [ -z "$pids" ] && return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  echo "warning: processes left in $dir: $pids" >&2
}

# The kubelet sets these (its kernel tunables) for the whole machine: `up` keeps their
# values and `down` puts them back. Not the host's IP forwarding, which `up` turns on to
# route between the nodes and leaves on: podman's and docker's networks turn it on too,
# and turning it off under them would cut their containers off.
KERNEL_TUNABLES=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
                 kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

stop_node() {  # the current node: every process of its cgroups, its namespaces, its veth
  local holder dir
  holder=$(holder_pid)
  kill_cgroup "$NODE_CGROUP"
  if [ -n "$holder" ]; then kill -KILL "$holder" 2>/dev/null || true; fi
  while read -r dir; do [ -n "$dir" ] && rmdir "$dir" 2>/dev/null || true; done \
    < <(cgroup_dirs "$NODE_CGROUP")
  ip link del "$HOST_VETH" 2>/dev/null || true
  rm -f "$NODE_RUN/holder.pid"
}

down() {
  local i dir
  cluster_shape
  # Every node the cluster had (and any left by an older or interrupted run).
  for i in $(seq 0 $((MAX_NODES - 1))); do
    node "$i"
    if [ "$i" -lt "$NODES" ] || [ -d "$NODE_RUN" ] || [ -e "/sys/class/net/$HOST_VETH" ]; then
      stop_node
    fi
  done
  kill_cgroup "$CGROUP"
  while read -r dir; do [ -n "$dir" ] && rmdir "$dir" 2>/dev/null || true; done < <(cgroup_dirs)
  for dir in $NODE_TMPFS; do  # the mount points `up` made on the host
    if [ -f "$RUN/made-$(basename "$dir")" ]; then rmdir "$dir" 2>/dev/null || true; fi
  done
  if [ -f "$LIB/kernel-tunables" ]; then
    sysctl -q -p "$LIB/kernel-tunables" >/dev/null || true
    rm -f "$LIB/kernel-tunables"
  fi
  rm -rf "$RUN" "$LIB"/node-*/kubelet "$LIB"/node-*/pods "$LIB/volumes"
  # What an older, one-node layout kept there.
  rm -rf "$LIB/kubelet" "$LIB/pods"
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
      "$API_IP" "DNS:kubernetes.default,DNS:kubernetes.default.svc" >san.ext
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
    cluster: {server: "https://$API_IP:$API_PORT", certificate-authority: "$RUN/pki/ca.crt"}
users:
  - name: admin
    user: {token: "$token"}
contexts:
  - name: $NAME
    context: {cluster: $NAME, user: admin, namespace: default}
current-context: $NAME
EOF
}

cgroups() {  # the current node's cgroup in every hierarchy, with its CPUs
  # The kubelet's cgroupRoot must exist in every hierarchy (cgroup v1); a new cpuset
  # cgroup has no CPUs or memory nodes until given some of its parent's.
  local root cpus_var=CPUS_$I
  for root in /sys/fs/cgroup/*/; do
    [ "$root" = /sys/fs/cgroup/unified/ ] || mkdir -p "$root$NAME/node-$I"
  done
  cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset$CGROUP/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset$CGROUP/cpuset.mems"
  echo "${!cpus_var}" >"/sys/fs/cgroup/cpuset$NODE_CGROUP/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset$NODE_CGROUP/cpuset.mems"
}

namespaces() {  # the holder of the current node's network and mount namespaces, its veth
  cgroups
  mkdir -p "$NODE_RUN/logs"
  # --propagation private: the node's mounts (overlays, volumes, network namespaces) are
  # seen by it alone and go with it.
  setsid unshare --net --mount --propagation private sleep infinity </dev/null >/dev/null 2>&1 &
  local holder=$!
  echo "$holder" >"/sys/fs/cgroup/pids$NODE_CGROUP/cgroup.procs"
  echo "$holder" >"$NODE_RUN/holder.pid"
  sleep 0.2
  ip link add "$HOST_VETH" type veth peer name eth0 netns "/proc/$holder/ns/net"
  ip addr add "$HOST_IP/24" dev "$HOST_VETH"
  ip link set "$HOST_VETH" up
  in_node ip link set lo up
  in_node ip addr add "$NODE_IP/24" dev eth0
  in_node ip link set eth0 up
  in_node ip route add default via "$HOST_IP"
  # The node's pods, from the host and (through it) from every other node.
  ip route replace "$NODE_POD_CIDR" via "$NODE_IP"
  if [ "$I" = 0 ]; then ip route replace "$SERVICE_CIDR" via "$NODE_IP"; fi
  in_node sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
  # The node sees its own interfaces under /sys/class/net (kubelet, CNI): a sysfs of its
  # network namespace over the host's net directories, keeping /sys/fs/cgroup.
  in_node bash -c "mkdir -p $NODE_RUN/sysfs && mount -t sysfs sysfs $NODE_RUN/sysfs &&
    mount --bind $NODE_RUN/sysfs/class/net /sys/class/net &&
    mount --bind $NODE_RUN/sysfs/devices/virtual/net /sys/devices/virtual/net"
  # What containerd, its shims, runc and the CNI plugins keep at fixed paths (shim
  # sockets, runc's state, the pods' network namespaces): on the node's own tmpfs.
  local dir
  for dir in $NODE_TMPFS; do
    [ -d "$dir" ] || { mkdir -p "$dir"; touch "$RUN/made-$(basename "$dir")"; }
    in_node mount -t tmpfs -o mode=0711 "$NAME-$I" "$dir"
  done
}

start() {  # NAME COMMAND...: in the node's namespaces and cgroup, logged in its logs/NAME.log
  local name=$1; shift
  in_node setsid "$@" </dev/null >"$NODE_RUN/logs/$name.log" 2>&1 &
  echo $! >"$NODE_RUN/$name.pid"
}

wait_for() {  # WHAT SECONDS COMMAND...
  local what=$1 seconds=$2; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "error: $what of node $I not up within $seconds s; the end of its log:" >&2
      tail -n 30 "$NODE_RUN/logs/$what.log" >&2 2>/dev/null || true
      exit 1
    fi
    sleep 1
  done
}

control_plane() {  # in node 0's namespaces
  start etcd "$bin/etcd" --name "$NAME" --data-dir "$RUN/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster "$NAME=http://127.0.0.1:2380" --unsafe-no-fsync
  wait_for etcd 60 in_node curl -sf http://127.0.0.1:2379/health
  start kube-apiserver "$bin/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
    --bind-address 0.0.0.0 --secure-port "$API_PORT" --advertise-address "$API_IP" \
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
  mkdir -p "$NODE_LIB/containerd" "$NODE_RUN/cni/net.d" "$NODE_RUN/cni/ipam"
  rm -rf "$NODE_RUN/containerd"  # a lost node's runtime state: its tasks are gone
  cat >"$NODE_RUN/containerd.toml" <<EOF
version = 2
root = "$NODE_LIB/containerd"
state = "$NODE_RUN/containerd"
[grpc]
  address = "$NODE_RUN/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Without CAP_SYS_RESOURCE (as here) no process may lower its oom_score_adj, and the
  # kubelet asks -998 for every sandbox: keep each at containerd's own instead.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE_RUN/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
[plugins."io.containerd.internal.v1.opt"]
  path = "$NODE_LIB/opt"
EOF
  # No masquerade: a pod is seen by its own address on every node (the host routes them).
  cat >"$NODE_RUN/cni/net.d/10-$NAME.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$NAME",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
     "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$NODE_RUN/cni/ipam",
              "ranges": [[{"subnet": "$NODE_POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  start containerd containerd --config "$NODE_RUN/containerd.toml"
  wait_for containerd 60 ctr --address "$NODE_RUN/containerd.sock" version
}

the_images() {  # every image the chart runs here
  echo "$PAUSE_IMAGE"
  echo localhost/socialbench:dev
  # shellcheck disable=SC1091
  (set -a; . compose/standins.env; env | sed -n 's/^SOCIALBENCH_[A-Z]*_IMAGE=//p')
}

save_images() {  # each image from podman into $LIB/images/<image>.tar, once per podman id
  local pause_dir=$RUN/pause image id archive variant
  mkdir -p "$pause_dir" "$LIB/images"
  gcc -static -Os -o "$pause_dir/pause" scripts/k8s/pause.c
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' \
    >"$pause_dir/Containerfile"
  quietly "podman build $PAUSE_IMAGE" podman build -q -t "$PAUSE_IMAGE" "$pause_dir"
  local variants=("")
  [ -n "$ARM64" ] && variants+=(-arm64)
  while read -r image; do
    for variant in "${variants[@]}"; do
      [ -n "$variant" ] && [ "$image" = "$PAUSE_IMAGE" ] && continue
      id=$(podman image inspect --format '{{.Id}}' "$image$variant" 2>/dev/null) ||
        die "podman has no image $image$variant: run scripts/build-images.sh${variant:+ and scripts/containers/arm64.sh}"
      archive=$LIB/images/$(echo "$image" | tr '/:' '__')$variant
      if [ "$(cat "$archive.id" 2>/dev/null)" != "$id" ]; then
        quietly "podman save $image$variant" podman save -o "$archive.tar.new" "$image$variant"
        mv "$archive.tar.new" "$archive.tar"
        echo "$id" >"$archive.id"
      fi
    done
  done < <(the_images)
}

import_images() {  # the saved images into the current node's containerd (namespace k8s.io)
  local image archive stamp ctr=(ctr --address "$NODE_RUN/containerd.sock" -n k8s.io)
  mkdir -p "$NODE_LIB/imported"
  while read -r image; do
    archive=$LIB/images/$(echo "$image" | tr '/:' '__')
    if [ "$I" = "$ARM64" ] && [ "$image" != "$PAUSE_IMAGE" ]; then
      archive=$archive-arm64
    fi
    stamp=$NODE_LIB/imported/$(basename "$archive")
    if [ "$(cat "$stamp" 2>/dev/null)" = "$(cat "$archive.id")" ] &&
       "${ctr[@]}" images ls -q | grep -qxF "$image"; then
      continue
    fi
    if [ "$archive" = "$LIB/images/$(echo "$image" | tr '/:' '__')" ]; then
      quietly "import $image into $NODE_NAME" "${ctr[@]}" images import "$archive.tar"
    else  # the arm64 variant, under the image's own name
      quietly "import $image-arm64 into $NODE_NAME as $image" \
        "${ctr[@]}" images import --platform linux/arm64 "$archive.tar"
      quietly "tag $image-arm64 as $image" "${ctr[@]}" images tag --force "$image-arm64" "$image"
    fi
    # The name now stands for this variant alone.
    rm -f "$NODE_LIB/imported/$(basename "${archive%-arm64}")"{,-arm64}
    cp "$archive.id" "$stamp"
  done < <(the_images)
}

node_agents() {
  local labels=() taints=()
  mkdir -p "$NODE_LIB/kubelet" "$NODE_LIB/pods" "$NODE_RUN/coredns"
  if [ "$I" = "$CLIENT" ]; then
    labels+=(--node-labels "$CLIENT_ROLE=client")
    taints+=(--register-with-taints "$CLIENT_ROLE=client:NoSchedule")
  elif [ "$I" = "$ARM64" ]; then
    labels+=(--node-labels "$CLIENT_ROLE=stack,kubernetes.io/arch=arm64,beta.kubernetes.io/arch=arm64")
  else
    labels+=(--node-labels "$CLIENT_ROLE=stack")
  fi
  cat >"$NODE_RUN/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
  x509: {clientCAFile: "$RUN/pki/ca.crt"}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: $NODE_CGROUP
clusterDNS: [$NODE_IP]
clusterDomain: cluster.local
containerRuntimeEndpoint: unix://$NODE_RUN/containerd.sock
failSwapOn: false
failCgroupV1: false
podLogsDir: $NODE_LIB/pods
# The images were imported, never pulled: the kubelet must not collect them as garbage.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 200Mi, nodefs.available: 1%, imagefs.available: 1%}
serializeImagePulls: false
resolvConf: "$NODE_RUN/coredns/host-resolv.conf"
EOF
  # A node on some of the CPUs: the kubelet's CPU manager "none" gives its pods' cgroup
  # (kubepods) every CPU of the machine, which the node's cpuset refuses; "static", with
  # the CPUs that are not the node's reserved strictly (out of the pods' shared pool too),
  # gives its pods the node's CPUs (and counts them alone as allocatable).
  local reserved
  reserved=$(other_cpus "$(cat "/sys/fs/cgroup/cpuset$NODE_CGROUP/cpuset.cpus")")
  if [ -n "$reserved" ]; then
    printf '%s\n' "cpuManagerPolicy: static" "reservedSystemCPUs: \"$reserved\"" \
      "cpuManagerPolicyOptions: {strict-cpu-reservation: \"true\"}" >>"$NODE_RUN/kubelet.yaml"
  fi
  # Pods of dnsPolicy Default get the host's resolver, which the node cannot reach:
  # the cluster's DNS then, as for every other pod.
  echo "nameserver $NODE_IP" >"$NODE_RUN/coredns/host-resolv.conf"
  # The arm64 node's kubelet is built for arm64 (run by QEMU): an amd64 kubelet sets
  # kubernetes.io/arch back to amd64 at every node-status update, over --node-labels.
  local kubelet=$bin/kubelet
  [ "$I" = "$ARM64" ] && kubelet=$bin/linux_arm64/kubelet
  start kubelet "$kubelet" --config "$NODE_RUN/kubelet.yaml" --kubeconfig "$RUN/kubeconfig" \
    --root-dir "$NODE_LIB/kubelet" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" \
    --cert-dir "$NODE_RUN/pki/kubelet" "${labels[@]}" "${taints[@]}"
  cat >"$NODE_RUN/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$RUN/kubeconfig"}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_CIDR
# Leave the host's conntrack table size and timeouts as they are.
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  start kube-proxy "$bin/kube-proxy" --config "$NODE_RUN/kube-proxy.yaml"
  cat >"$NODE_RUN/coredns/Corefile" <<EOF
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
  start coredns "$bin/coredns" -conf "$NODE_RUN/coredns/Corefile"
}

node_ready() {  # wait for the current node's DNS and kubelet; record its CPUs on it
  local cpus
  wait_for coredns 60 in_node curl -sf http://127.0.0.1:8181/ready
  wait_for kubelet 120 "$bin/kubectl" wait --for=condition=Ready "node/$NODE_NAME" --timeout=5s
  cpus=$(cat "/sys/fs/cgroup/cpuset$NODE_CGROUP/cpuset.cpus")
  "$bin/kubectl" annotate --overwrite node "$NODE_NAME" "$CPUS_ANNOTATION=$cpus" >/dev/null
}

start_node() {  # the current node: namespaces, containerd, images, agents
  namespaces
  if [ "$I" = 0 ]; then
    step "etcd, kube-apiserver (https://$API_IP:$API_PORT), controller manager, scheduler"
    control_plane
  fi
  container_runtime
  import_images
  node_agents
}

VOLUMES=24                        # local PersistentVolumes per stack node (a release claims 9)
VOLUME_SIZE=50Gi

storage() {  # a default StorageClass of static local volumes: the stores' persistence
  local i n manifest dir
  manifest="apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
  annotations: {storageclass.kubernetes.io/is-default-class: \"true\"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer"
  for n in $(seq 0 $((NODES - 1))); do
    [ "$n" = "$CLIENT" ] && continue
    node "$n"
    for i in $(seq 1 $VOLUMES); do
      # 0777: the stores' images run as users of their own, and fsGroup does not apply to
      # local volumes of a directory.
      dir=$LIB/volumes/node-$n/pv-$i
      mkdir -p "$dir" && chmod 0777 "$dir"
      manifest+="
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: node-$n-pv-$i}
spec:
  capacity: {storage: $VOLUME_SIZE}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: local
  local: {path: $dir}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$NODE_NAME]}]"
    done
  done
  echo "$manifest" | "$bin/kubectl" apply -f - >>"$SETUP_LOG"
}

values() {  # the chart's values for this node: the imported images, the front end on a NodePort
  local mongodb redis memcached nginx
  # shellcheck disable=SC1091
  eval "$(set -a; . compose/standins.env; env | grep '^SOCIALBENCH_[A-Z]*_IMAGE=' |
          sed 's/^SOCIALBENCH_\([A-Z]*\)_IMAGE=/\L\1=/')"
  cat >"$RUN/values.yaml" <<EOF
# Written by scripts/k8s-node.sh: the images imported into the nodes' containerd (never
# pulled), the front end on a NodePort of every node, and the stores' CPU requests
# lowered so that the default per-service layout's 11 instances fit one 2-CPU node
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
  if [ -n "$CLIENT" ]; then
    cat >>"$RUN/values.yaml" <<EOF
# The load Job's drivers and collector on the client node, alone on its CPUs.
load:
  nodeSelector: {$CLIENT_ROLE: client}
  tolerations: [{key: $CLIENT_ROLE, operator: Equal, value: client, effect: NoSchedule}]
EOF
  fi
}

cpu_list() {  # a cpuset list as CPUs, e.g. 0-2,5 -> "0 1 2 5"
  local part out=()
  for part in ${1//,/ }; do out+=($(seq "${part%-*}" "${part#*-}")); done
  echo "${out[*]}"
}

other_cpus() {  # LIST: the machine's CPUs not in LIST, as a list (e.g. 0-1 and 1 -> 0)
  local cpu mine others=()
  mine=" $(cpu_list "$1") "
  for cpu in $(cpu_list "$(cat /sys/fs/cgroup/cpuset/cpuset.cpus)"); do
    [[ "$mine" == *" $cpu "* ]] || others+=("$cpu")
  done
  (IFS=,; echo "${others[*]}")
}

shape() {  # NODES CLIENT ARM64 STACK_CPUS CLIENT_CPUS: the nodes and CPUs, into $RUN/cluster.env
  local stack_nodes=$1 client=$2 arm64=$3 stack_cpus=$4 client_cpus=$5 all cpus i
  all=$(cat /sys/fs/cgroup/cpuset/cpuset.cpus)
  if [ "$client" = true ]; then
    cpus=($(cpu_list "$all"))
    if [ ${#cpus[@]} -ge 2 ]; then
      client_cpus=${client_cpus:-${cpus[-1]}}
      stack_cpus=${stack_cpus:-$(IFS=,; echo "${cpus[*]:0:${#cpus[@]}-1}")}
    fi
  fi
  NODES=$stack_nodes
  CLIENT=""
  ARM64=""
  [ "$arm64" = true ] && ARM64=$((NODES - 1))
  [ "$client" = true ] && { CLIENT=$NODES; NODES=$((NODES + 1)); }
  {
    echo "NODES=$NODES"
    echo "CLIENT=$CLIENT"
    echo "ARM64=$ARM64"
    for i in $(seq 0 $((NODES - 1))); do
      if [ "$i" = "$CLIENT" ]; then echo "CPUS_$i=${client_cpus:-$all}"
      else echo "CPUS_$i=${stack_cpus:-$all}"; fi
    done
  } >"$RUN/cluster.env"
  . "$RUN/cluster.env"
}

up() {
  local stack_nodes=1 client=false arm64=false stack_cpus="" client_cpus="" i
  while [ $# -gt 0 ]; do
    case "$1" in
      --nodes) stack_nodes=${2:-}; shift 2 ;;
      --client-node) client=true; shift ;;
      --arm64-node) arm64=true; shift ;;
      --stack-cpus) stack_cpus=${2:-}; shift 2 ;;
      --client-cpus) client_cpus=${2:-}; shift 2 ;;
      *) usage ;;
    esac
  done
  [[ "$stack_nodes" =~ ^[1-9][0-9]*$ ]] && [ "$stack_nodes" -lt "$MAX_NODES" ] ||
    die "--nodes: a number of nodes from 1 to $((MAX_NODES - 1)), not '$stack_nodes'"
  [ "$(id -u)" = 0 ] || die "the cluster needs root (namespaces, cgroups, iptables)"
  if cluster_running; then echo "already running"; print_env; exit 0; fi
  down >/dev/null
  mkdir -p "$RUN/logs" "$RUN/pki" "$LIB"
  sysctl "${KERNEL_TUNABLES[@]}" | sed 's/ = /=/' >"$LIB/kernel-tunables"
  if [ "$arm64" = true ]; then
    [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || die "--arm64-node: no QEMU for arm64" \
      "in binfmt_misc (scripts/containers/arm64.sh registers it)"
    [ "$stack_nodes" -ge 2 ] || die "--arm64-node: give --nodes 2 or more (node 0 stays amd64)"
    [ -x "$bin/linux_arm64/kubelet" ] || die "--arm64-node: no kubelet built for arm64" \
      "($bin/linux_arm64/kubelet: scripts/build-k8s.sh --arm64-kubelet)"
  fi
  shape "$stack_nodes" "$client" "$arm64" "$stack_cpus" "$client_cpus"
  step "packages and binaries"
  need_packages
  export KUBECONFIG=$RUN/kubeconfig PATH="$bin:$PATH"
  # The host routes between the nodes.
  sysctl -qw net.ipv4.ip_forward=1
  step "certificates; images from podman"
  certificates
  save_images
  for i in $(seq 0 $((NODES - 1))); do
    node "$i"
    step "node $NODE_NAME ($NODE_IP, pods $NODE_POD_CIDR, CPUs $(eval echo "\$CPUS_$i"))"
    start_node
  done
  for i in $(seq 0 $((NODES - 1))); do node "$i"; node_ready; done
  storage
  values
  step "$NODES node(s) Ready"
  print_env
}

status() {
  cluster_running || { echo "not running"; exit 1; }
  export KUBECONFIG=$RUN/kubeconfig
  "$bin/kubectl" get nodes -o wide
  "$bin/kubectl" get pods -A -o wide
}

images() {
  cluster_running || die "the cluster is not running: scripts/k8s-node.sh up"
  cluster_shape
  save_images
  local i
  for i in $(seq 0 $((NODES - 1))); do node "$i"; running && import_images; done
  echo "imported; pods started from now on run them"
}

node_arg() {  # I: a node of the running cluster
  cluster_running || die "the cluster is not running: scripts/k8s-node.sh up"
  cluster_shape
  [[ "${1:-}" =~ ^[0-9]+$ ]] && [ "$1" -lt "$NODES" ] ||
    die "no node '${1:-}': the nodes are 0 to $((NODES - 1))"
  node "$1"
}

lose_node() {
  node_arg "${1:-}"
  [ "$I" != 0 ] || die "node 0 runs the control plane: lose another"
  running || die "node $I is not running"
  stop_node
  echo "node $NODE_NAME stopped: its kubelet, containerd, containers and network are gone"
}

return_node() {
  node_arg "${1:-}"
  running && die "node $I is running"
  export KUBECONFIG=$RUN/kubeconfig PATH="$bin:$PATH"
  step "node $NODE_NAME back"
  start_node
  node_ready
  step "node $NODE_NAME Ready"
}

case "${1:-}" in
  up) shift; up "$@" ;;
  images) images ;;
  down) down ;;
  env) print_env ;;
  status) status ;;
  stop-node) lose_node "${2:-}" ;;
  start-node) return_node "${2:-}" ;;
  *) usage ;;
esac
