# A real Kubernetes node on containerd 1.x: kubelet-node.sh.
CTRD_MAJOR=1
. /e2e/scenarios/kubelet-node.sh
