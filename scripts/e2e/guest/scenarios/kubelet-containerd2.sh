# A real Kubernetes node on containerd 2.x: kubelet-node.sh.
CTRD_MAJOR=2
. /e2e/scenarios/kubelet-node.sh
