module pinion.example/interop/katalyst

go 1.26.0

require k8s.io/kubelet v0.24.6

require (
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/golang/protobuf v1.5.3 // indirect
	golang.org/x/net v0.9.0 // indirect
	golang.org/x/sys v0.7.0 // indirect
	golang.org/x/text v0.9.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20230525234030-28d5490b6b19 // indirect
	google.golang.org/grpc v1.57.1 // indirect
	google.golang.org/protobuf v1.30.0 // indirect
	k8s.io/apimachinery v0.24.6 // indirect
)

// katalyst-core's own pin (its go.mod at d8c28ea1): the kubelet fork whose
// generated resourceplugin/v1alpha1 and pluginregistration packages are
// katalyst's wire.
replace k8s.io/kubelet => github.com/kubewharf/kubelet v1.24.6-kubewharf-pre.2
