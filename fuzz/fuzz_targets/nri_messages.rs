//! NRI input from the runtime: arbitrary bytes as the payload stream of one
//! logical connection — ttrpc message reassembly, the ttrpc request
//! envelope, the NRI requests Pinion reads, and the Kubernetes mapping of
//! the pods and containers they carry. Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinion_nri::proto::{nri, ttrpc};
use pinion_nri::{kube, model, wire};
use prost::Message as _;

fuzz_target!(|data: &[u8]| {
    let mut assembler = wire::Assembler::default();
    assembler.push(data);
    while let Ok(Some(message)) = assembler.next_message() {
        if let Ok(request) = ttrpc::Request::decode(message.payload.as_slice()) {
            inspect(&request.payload);
        }
        inspect(&message.payload);
    }
});

fn inspect(payload: &[u8]) {
    if let Ok(sync) = nri::SynchronizeRequest::decode(payload) {
        let pods: Vec<model::PodSandbox> = sync.pods.into_iter().map(Into::into).collect();
        let containers: Vec<model::Container> =
            sync.containers.into_iter().map(Into::into).collect();
        for pod in &pods {
            let own: Vec<&model::Container> =
                containers.iter().filter(|c| c.pod_sandbox_id == pod.id).collect();
            let _ = kube::kube_pod(pod, &own);
        }
    }
    if let Ok(request) = nri::ContainerRequest::decode(payload) {
        if let (Some(pod), Some(container)) = (request.pod, request.container) {
            let pod: model::PodSandbox = pod.into();
            let container: model::Container = container.into();
            let _ = kube::kube_pod(&pod, &[&container]);
        }
    }
}
