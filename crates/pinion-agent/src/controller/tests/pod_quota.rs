//! Owns the tests of the pod-level CFS quota of runtime containers.
//!
//! Regression (twenty-fourth session): with kubelet at `none`, a pod whose
//! container Pinion gave exclusive CPUs kept the CPU limit kubelet sets as
//! its pod cgroup's quota, so the whole pod — its containers' start in
//! `runc` included — ran throttled, while kubelet's `static` policy creates
//! such a pod's cgroup without quota (`DisableCPUQuotaWithExclusiveCPUs`).

use pinion_host::cgroup::ContainerCgroup;

use super::*;

/// Runtime container `id` of pod `uid` asking for `cpus`, in kubelet's
/// cgroupfs layout (`/kubepods/pod<uid>/<id>`) or below `parent`.
fn in_pod(uid: &str, cpus: &str, id: &str, parent: Option<&str>) -> AdmitRequest {
    let mut request = runtime_request(uid, Some(cpus), id);
    let parent = parent.map_or_else(|| format!("/kubepods/pod{uid}"), str::to_string);
    let cgroup = ContainerCgroup::resolve(&format!("{parent}/{id}")).expect("path");
    request.frontend = Frontend::runtime_in(id, Some(cgroup));
    request
}

fn lifted(host: &FakeCgroups) -> Vec<String> {
    host.tree()
        .quota_lifted
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn regression_a_pod_with_exclusive_cpus_keeps_no_cfs_quota_of_kubelets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, mut updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    // Admitted (NRI CreateContainer): lifted before the runtime starts it.
    let g = admit(&mut controller, &in_pod("g", "2", "cg", None)).expect("admit");
    assert_eq!(
        g.placement.resources.cpu_quota,
        Some(-1),
        "its own quota too"
    );
    assert_eq!(lifted(&host), vec!["/kubepods/podg"]);
    // A second exclusive container of another pod: its own pod's.
    admit(&mut controller, &in_pod("h", "1", "ch", None)).expect("admit");
    // A shared container: its pod keeps kubelet's quota, as under kubelet.
    admit(&mut controller, &in_pod("b", "500m", "cb", None)).expect("admit");
    answer_updates(&mut controller, &mut updates);
    controller.reconcile();
    assert_eq!(
        lifted(&host),
        vec!["/kubepods/podg", "/kubepods/podh"],
        "once per container, none for the shared pod"
    );
}

#[test]
fn a_parent_not_named_after_the_pod_and_a_failed_write_leave_the_admission_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, _updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    // Not kubelet's pod cgroup above the container: nothing is written.
    admit(
        &mut controller,
        &in_pod("g", "1", "cg", Some("/custom/place")),
    )
    .expect("admit");
    assert!(lifted(&host).is_empty());
    // The write refused: logged; the container is admitted all the same.
    host.tree().fail_writes = true;
    let h = admit(&mut controller, &in_pod("h", "1", "ch", None)).expect("admitted");
    assert_eq!(h.placement.cpus.len(), 1);
    host.tree().fail_writes = false;
    controller.reconcile();
    assert!(lifted(&host).is_empty(), "not retried: {:?}", lifted(&host));
}
