//! Pinion's CPU plugin inside the agent: pools that size themselves (issue
//! #17). A shared pool grows under measured load — busy CPUs in
//! `/proc/stat`, its members' PSI on cgroup v2, their CFS throttling on
//! cgroup v1 — and gives the CPUs back when it is idle, never taking reserved
//! or dedicated CPUs; pins from `pinion pools set` hold. The sysroot's
//! `/proc/stat` and the pods' cgroup files are written by the tests. A
//! release answers once the plugin forgot the pod, so its CPUs can be
//! admitted again at once.

mod qrm_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use qrm_common::{admission, admit_at, builtin, meminfo_root, wait_until, Agent, PATIENCE, QOS};

use pinion_core::CpuSet;
use pinion_host::cgroup::fake::FakeCgroups;
use pinion_host::pod_cgroups::{PodCgroups, PodCpuSource};
use pinion_plugins::cpu::SetPoolError;

/// Writes `<root>/proc/stat` with every CPU's cumulative time.
fn write_stat(root: &Path, times: &BTreeMap<u32, (u64, u64)>) {
    let mut text = String::from("cpu  0 0 0 0 0 0 0 0 0 0\n");
    for (cpu, (busy, idle)) in times {
        text.push_str(&format!("cpu{cpu} {busy} 0 0 {idle} 0 0 0 0 0 0\n"));
    }
    std::fs::create_dir_all(root.join("proc")).expect("proc");
    let tmp = root.join("proc/stat.tmp");
    std::fs::write(&tmp, text).expect("stat");
    std::fs::rename(tmp, root.join("proc/stat")).expect("stat");
}

/// A CPU "burner" as `/proc/stat` tells it: every 20 ms the CPUs of `busy()`
/// gain 2 busy ticks, the others 2 idle ticks.
fn burn(
    root: PathBuf,
    busy: impl Fn() -> CpuSet + Send + 'static,
    stop: Arc<Mutex<bool>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut times: BTreeMap<u32, (u64, u64)> = (0..16).map(|cpu| (cpu, (0, 0))).collect();
        while !*stop.lock().expect("lock") {
            let hot = busy();
            for (cpu, (b, i)) in &mut times {
                if hot.contains(*cpu) {
                    *b += 2;
                } else {
                    *i += 2;
                }
            }
            write_stat(&root, &times);
            std::thread::sleep(Duration::from_millis(20));
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_pool_grows_under_load_gives_cpus_back_when_idle_and_obeys_pins() {
    let sysroot = meminfo_root();
    let agent = Agent::fresh_with_builtin(&["cpu"], sysroot.path()).await;
    let pools = agent
        .handle
        .cpu_pools()
        .expect("the built-in cpu plugin's pools");
    let dedicated = admit_at(&agent, "pinion-run-db", "2", "dedicated_cores").await;
    let web = admit_at(&agent, "pinion-run-web", "500m", "shared_cores").await;
    let offline = admit_at(&agent, "pinion-run-batch", "500m", "reclaimed_cores").await;
    let reserved = agent.handle.snapshot().reserved.clone();
    let share = |pools: &pinion_api::local::Pools| {
        pools
            .pools
            .iter()
            .find(|p| p.name == "share")
            .cloned()
            .expect("the share pool")
    };
    let start = share(&pools.view());
    assert_eq!(start.members, ["pinion-run-web/main"]);
    assert_eq!(
        CpuSet::parse_list(&start.cpus).expect("cpus"),
        web.placement.cpus
    );
    let initial = start.size;

    // The online pool's CPUs are saturated: it grows, a CPU at a time, and
    // its member's cgroup follows; nothing comes from the reserved or the
    // dedicated CPUs.
    let stop = Arc::new(Mutex::new(false));
    let burner = burn(
        sysroot.path().to_path_buf(),
        {
            let pools = pools.clone();
            move || CpuSet::parse_list(&share(&pools.view()).cpus).unwrap_or_default()
        },
        Arc::clone(&stop),
    );
    let deadline = Instant::now() + PATIENCE;
    loop {
        let now = share(&pools.view());
        let cpus = CpuSet::parse_list(&now.cpus).expect("cpus");
        assert!(
            cpus.is_disjoint(&reserved) && cpus.is_disjoint(&dedicated.placement.cpus),
            "{cpus}"
        );
        if now.size >= initial + 2 {
            assert!(now.pressure.is_some_and(|p| p > 50.0), "{now:?}");
            assert!(
                now.last_change
                    .as_deref()
                    .is_some_and(|c| c.contains("pressure")),
                "{now:?}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "the pool never grew: {now:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let grown = CpuSet::parse_list(&share(&pools.view()).cpus).expect("cpus");
    let cgroup = web.cgroup.clone().expect("cgroup");
    agent
        .wait_for_cgroup(&cgroup, "on the grown pool", |cpus, _| {
            cpus.len() > web.placement.cpus.len()
        })
        .await;
    let offline_cgroup = offline.cgroup.clone().expect("cgroup");
    agent
        .wait_for_cgroup(&offline_cgroup, "off the grown pool", |cpus, _| {
            cpus.is_disjoint(&grown)
        })
        .await;

    // Idle: it gives the CPUs back (down to its requests), reclaim gets them.
    *stop.lock().expect("lock") = true;
    burner.join().expect("burner");
    let stop = Arc::new(Mutex::new(false));
    let idler = burn(sysroot.path().to_path_buf(), CpuSet::new, Arc::clone(&stop));
    let deadline = Instant::now() + PATIENCE;
    while share(&pools.view()).size > 1 {
        assert!(
            Instant::now() < deadline,
            "the pool never shrank: {:?}",
            share(&pools.view())
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        CpuSet::parse_list(&pools.view().reclaim)
            .expect("reclaim")
            .len()
            > 1
    );

    // An advisor pins it to 4 CPUs: it holds 4 although idle; `auto` hands
    // it back; a bad size names the value.
    pools.set("share", "4", false).expect("pin");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pinned = share(&pools.view());
    assert_eq!((pinned.size, pinned.pin.as_str()), (4, "4"), "{pinned:?}");
    assert_eq!(CpuSet::parse_list(&pinned.cpus).expect("cpus").len(), 4);
    let err = pools
        .set("share", "0", false)
        .expect_err("zero CPUs")
        .to_string();
    assert!(err.contains("share") && err.contains("\"0\""), "{err}");
    pools.set("share", "auto", false).expect("auto");
    assert_eq!(share(&pools.view()).pin, "auto");
    // A typo is refused with the pools that exist (issue 33); a pool sized
    // before its first member needs `create` and shows as a pending pin.
    let err = pools.set("nosuch", "1", false).expect_err("unknown pool");
    assert!(
        matches!(&err, SetPoolError::Unknown { pool, known } if pool == "nosuch" && known == &["share"]),
        "{err}"
    );
    pools
        .set("later", "2", true)
        .expect("a pool before its first member");
    let pending = pools.view().pending_pins;
    assert_eq!(
        pending.get("later").map(String::as_str),
        Some("2"),
        "{pending:?}"
    );
    pools.set("later", "auto", false).expect("its pin is known");
    assert!(pools.view().pending_pins.is_empty());
    *stop.lock().expect("lock") = true;
    idler.join().expect("idler");
    agent.stop().await;
}

/// Admits the closed-loop tests' two online pods (`shared_cores`, 500m):
/// one of Pinion's own runs (its cgroup named by its UID) and one as
/// kubelet names it (`kube-pod-1`); answers the run's admission.
async fn admit_online_pods(agent: &Agent) -> pinion_agent::controller::Admitted {
    let web = admit_at(agent, "pinion-run-web", "500m", "shared_cores").await;
    admit_at(agent, "kube-pod-1", "500m", "shared_cores").await;
    web
}

/// Waits until the view `pool()` gives satisfies `done` ("the pool never
/// `what`" after [`PATIENCE`]); answers that view.
async fn wait_for_pool(
    pool: impl Fn() -> pinion_api::local::PoolView,
    done: impl Fn(&pinion_api::local::PoolView) -> bool,
    what: &str,
) -> pinion_api::local::PoolView {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let now = pool();
        if done(&now) {
            return now;
        }
        assert!(Instant::now() < deadline, "the pool never {what}: {now:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes `<dir>/cpu.pressure` with "some avg10" = `avg10`.
fn write_pressure(dir: &Path, avg10: f64) {
    std::fs::create_dir_all(dir).expect("pod cgroup");
    let text = format!(
        "some avg10={avg10:.2} avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    );
    let tmp = dir.join("cpu.pressure.tmp");
    std::fs::write(&tmp, text).expect("cpu.pressure");
    std::fs::rename(tmp, dir.join("cpu.pressure")).expect("cpu.pressure");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_pool_grows_on_its_members_cpu_pressure_although_its_cpus_are_not_all_busy() {
    let sysroot = meminfo_root();
    let cgroups = tempfile::tempdir().expect("cgroup mount");
    let own = cgroups.path().join("pinion");
    let mut agent = Agent::start_in(
        tempfile::tempdir().expect("tempdir"),
        FakeCgroups::default(),
        builtin(&["cpu"]),
    );
    agent
        .start_builtin_with(
            sysroot.path(),
            Some(PodCpuSource::V2(PodCgroups::new(
                cgroups.path().to_path_buf(),
                Some(own.clone()),
            ))),
        )
        .await;
    let pools = agent.handle.cpu_pools().expect("the cpu plugin's pools");
    // One pod of Pinion's own (`pinion run`: its cgroup is named by its
    // UID) and one as kubelet's systemd driver names it.
    let web = admit_online_pods(&agent).await;
    let kube_pod = cgroups
        .path()
        .join("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podkube_pod_1.slice");
    write_pressure(&own.join("pinion-run-web"), 0.0);
    write_pressure(&kube_pod, 0.0);
    let share = || {
        pools
            .view()
            .pools
            .into_iter()
            .find(|p| p.name == "share")
            .expect("the share pool")
    };
    let initial = share().size;

    // Every CPU is idle by /proc/stat, but the kubelet pod's tasks wait for
    // a CPU 40 % of the time: the pool grows on that alone.
    let stop = Arc::new(Mutex::new(false));
    let idler = burn(sysroot.path().to_path_buf(), CpuSet::new, Arc::clone(&stop));
    write_pressure(&kube_pod, 40.0);
    let grown = wait_for_pool(share, |p| p.size > initial, "grew").await;
    assert_eq!(grown.psi, Some(40.0), "{grown:?}");
    assert_eq!(grown.pressure, Some(40.0), "{grown:?}");
    let cgroup = web.cgroup.clone().expect("cgroup");
    agent
        .wait_for_cgroup(&cgroup, "on the grown pool", |cpus, _| {
            cpus.len() > web.placement.cpus.len()
        })
        .await;

    // The pressure is gone: the idle pool gives its CPUs back.
    write_pressure(&kube_pod, 0.0);
    wait_for_pool(share, |p| p.size <= initial, "shrank").await;
    assert_eq!(share().psi, Some(0.0));
    *stop.lock().expect("lock") = true;
    idler.join().expect("idler");
    agent.stop().await;
}

/// Writes a cgroup v1 `<dir>/cpu.stat` with these CFS counters.
fn write_cpu_stat(dir: &Path, periods: u64, throttled: u64) {
    std::fs::create_dir_all(dir).expect("pod cgroup");
    let text = format!(
        "nr_periods {periods}\nnr_throttled {throttled}\nthrottled_time {}\n",
        throttled * 1_000_000
    );
    let tmp = dir.join("cpu.stat.tmp");
    std::fs::write(&tmp, text).expect("cpu.stat");
    std::fs::rename(tmp, dir.join("cpu.stat")).expect("cpu.stat");
}

/// A pod's CFS scheduler as its v1 `cpu.stat` tells it: every 20 ms it runs
/// 10 more periods, `throttled()` of them throttled.
fn throttle(
    dir: PathBuf,
    throttled: Arc<Mutex<u64>>,
    stop: Arc<Mutex<bool>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let (mut periods, mut total) = (0, 0);
        while !*stop.lock().expect("lock") {
            periods += 10;
            total += *throttled.lock().expect("lock");
            write_cpu_stat(&dir, periods, total);
            std::thread::sleep(Duration::from_millis(20));
        }
    })
}

/// #17 on cgroup v1 (no PSI): a shared pool grows while its members' pods
/// are throttled in most of their CFS periods, although every CPU is idle
/// by /proc/stat, and gives the CPUs back when the throttling stops; the
/// reserved and dedicated CPUs stay out of it throughout. The pods' cgroups
/// are a directory tree shaped like the v1 `cpu` and `cpuacct` hierarchies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_pool_grows_while_its_members_are_throttled_on_cgroup_v1_and_shrinks_after() {
    let sysroot = meminfo_root();
    let cgroups = tempfile::tempdir().expect("cgroup hierarchies");
    let cpu = cgroups.path().join("cpu");
    let own = cpu.join("pinion");
    // Pinion's own run is mirrored in the cpu hierarchy only; the kubelet
    // pod (cgroupfs driver) has its cpuacct cgroup too.
    let web_dir = own.join("pinion-run-web");
    let kube_dir = cpu.join("kubepods/burstable/podkube-pod-1");
    write_cpu_stat(&web_dir, 0, 0);
    write_cpu_stat(&kube_dir, 0, 0);
    let acct = cgroups
        .path()
        .join("cpuacct/kubepods/burstable/podkube-pod-1");
    std::fs::create_dir_all(&acct).expect("cpuacct");
    std::fs::write(acct.join("cpuacct.usage"), "1000\n").expect("cpuacct.usage");
    let mut agent = Agent::start_in(
        tempfile::tempdir().expect("tempdir"),
        FakeCgroups::default(),
        builtin(&["cpu"]),
    );
    let source = PodCpuSource::at(cgroups.path(), Some(own.clone()));
    assert!(matches!(source, PodCpuSource::V1(_)), "{source:?}");
    agent.start_builtin_with(sysroot.path(), Some(source)).await;
    let pools = agent.handle.cpu_pools().expect("the cpu plugin's pools");
    let dedicated = admit_at(&agent, "pinion-run-db", "2", "dedicated_cores").await;
    let web = admit_online_pods(&agent).await;
    let reserved = agent.handle.snapshot().reserved.clone();
    let share = || {
        let now = pools
            .view()
            .pools
            .into_iter()
            .find(|p| p.name == "share")
            .expect("the share pool");
        let cpus = CpuSet::parse_list(&now.cpus).expect("cpus");
        assert!(
            cpus.is_disjoint(&reserved) && cpus.is_disjoint(&dedicated.placement.cpus),
            "the pool took reserved or dedicated CPUs: {now:?}"
        );
        now
    };
    let initial = share().size;

    // Every CPU idle by /proc/stat; the web pod runs unthrottled, the
    // kubelet pod is throttled in 8 of every 10 periods: the pool grows.
    let stop = Arc::new(Mutex::new(false));
    let idler = burn(sysroot.path().to_path_buf(), CpuSet::new, Arc::clone(&stop));
    let unthrottled = throttle(web_dir, Arc::new(Mutex::new(0)), Arc::clone(&stop));
    let throttled = Arc::new(Mutex::new(8));
    let kube = throttle(kube_dir, Arc::clone(&throttled), Arc::clone(&stop));
    let grown = wait_for_pool(share, |p| p.size > initial, "grew").await;
    assert_eq!(grown.psi, None, "{grown:?}");
    assert!(
        grown
            .last_change
            .as_deref()
            .is_some_and(|c| c.contains("pressure 80.0%")),
        "{grown:?}"
    );
    let cgroup = web.cgroup.clone().expect("cgroup");
    agent
        .wait_for_cgroup(&cgroup, "on the grown pool", |cpus, _| {
            cpus.len() > web.placement.cpus.len()
        })
        .await;

    // The throttling stops: the idle pool gives its CPUs back.
    *throttled.lock().expect("lock") = 0;
    wait_for_pool(share, |p| p.size <= initial, "shrank").await;
    wait_until("the view shows no throttling", || {
        share().throttled == Some(0.0)
    })
    .await;
    *stop.lock().expect("lock") = true;
    for thread in [idler, unthrottled, kube] {
        thread.join().expect("writer");
    }
    agent.stop().await;
}

/// Regression: a release answered before the CPU plugin heard `RemovePod`
/// (the removal loop sends it afterwards), so a pod admitted right after,
/// onto the CPUs just released, was refused while the plugin still held
/// them. On the agent's one-thread runtime (this test's) the next
/// admission's `Allocate` always ran before the removal loop.
#[tokio::test]
async fn regression_a_pod_admitted_right_after_a_release_gets_the_released_cpus() {
    let sysroot = meminfo_root();
    let agent = Agent::fresh_with_builtin(&["cpu"], sysroot.path()).await;
    let dedicated = |id: &str| admission(id, "8", &[], &[(QOS, "dedicated_cores")]);
    let first = admit_at(&agent, "pinion-run-round-0", "8", "dedicated_cores").await;
    assert_eq!(first.placement.cpus.len(), 8, "{first:?}");
    let refused = agent.handle.admit(dedicated("pinion-run-too-many")).await;
    assert!(
        refused.is_err(),
        "16 CPUs, one reserved: a second 8-CPU dedicated pod must not fit beside the first ({refused:?})"
    );
    for round in 1..=5 {
        let previous = format!("pinion-run-round-{}", round - 1);
        agent
            .handle
            .release(previous.clone(), None)
            .await
            .expect("released");
        assert!(
            !agent
                .handle
                .snapshot()
                .pending_plugin_removals
                .contains(&previous),
            "round {round}: the release answered before the plugins heard of it"
        );
        let id = format!("pinion-run-round-{round}");
        let admitted = agent
            .handle
            .admit(dedicated(&id))
            .await
            .unwrap_or_else(|err| panic!("round {round}: {id} refused: {err}"));
        assert_eq!(admitted.placement.cpus.len(), 8, "{admitted:?}");
    }
    agent.stop().await;
}

/// Issue 28 item 2: podresources `List` showed no `cpu_ids` for a
/// container whose CPUs the built-in CPU plugin dedicated to it, so a
/// topology exporter counted them as free. A shared-cores container keeps
/// an empty list (its pool is not held alone).
#[tokio::test]
async fn regression_podresources_lists_the_cpus_a_plugin_dedicated() {
    let sysroot = meminfo_root();
    let agent = Agent::fresh_with_builtin(&["cpu"], sysroot.path()).await;
    let dedicated = admit_at(&agent, "pinion-run-dedicated", "4", "dedicated_cores").await;
    let shared = admit_at(&agent, "pinion-run-shared", "1", "shared_cores").await;
    assert_eq!(dedicated.placement.cpus.len(), 4, "{dedicated:?}");
    let answer = pinion_agent::podresources::list(&agent.handle.snapshot());
    let cpus = |name: &str| -> Vec<i64> {
        answer
            .pod_resources
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("{name} not listed: {answer:?}"))
            .containers[0]
            .cpu_ids
            .clone()
    };
    let want: Vec<i64> = dedicated.placement.cpus.iter().map(i64::from).collect();
    assert_eq!(cpus("pinion-run-dedicated"), want);
    assert!(
        cpus("pinion-run-shared").is_empty(),
        "shared cores are not held alone: {shared:?}"
    );
    agent.stop().await;
}

/// Found from outside (session 44): the built-in CPU plugin kept the
/// machine the agent started on. After a CPU went offline it went on
/// answering it, the manager refused those answers, and its containers
/// kept their cpusets as the kernel had cut them. The plugin now follows
/// the agent's machine: the dedicated container gets a CPU in place of
/// the lost one, the shared pool is laid out on the CPUs left, and both
/// cgroups follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_the_builtin_cpu_plugin_follows_a_cpu_going_offline() {
    let sysroot = meminfo_root();
    let agent = Agent::fresh_with_builtin(&["cpu"], sysroot.path()).await;
    let dedicated = admit_at(&agent, "pinion-run-db", "2", "dedicated_cores").await;
    let web = admit_at(&agent, "pinion-run-web", "500m", "shared_cores").await;
    let lost = CpuSet::from_iter([dedicated.placement.cpus.iter().next().expect("a cpu")]);
    let machine = agent
        .handle
        .snapshot()
        .machine
        .clone()
        .expect("the machine");
    let offline = pinion_core::testing::without_cpus(&machine, &lost);
    agent
        .handle
        .follow_topology(offline)
        .await
        .expect("the agent follows");
    let db = dedicated.cgroup.clone().expect("cgroup");
    agent
        .wait_for_cgroup(&db, "two online cpus", |cpus, _| {
            cpus.len() == 2 && cpus.is_disjoint(&lost)
        })
        .await;
    let pools = agent.handle.cpu_pools().expect("pools");
    wait_until("the plugin's pools are off the offline cpu", || {
        pools
            .view()
            .pools
            .iter()
            .all(|p| CpuSet::parse_list(&p.cpus).is_ok_and(|c| c.is_disjoint(&lost)))
    })
    .await;
    let web_cgroup = web.cgroup.clone().expect("cgroup");
    agent
        .wait_for_cgroup(&web_cgroup, "off the offline cpu", |cpus, _| {
            !cpus.is_empty() && cpus.is_disjoint(&lost)
        })
        .await;
    let later = admit_at(&agent, "pinion-run-later", "2", "dedicated_cores").await;
    assert!(
        later.placement.cpus.is_disjoint(&lost),
        "{}",
        later.placement.cpus
    );
    agent.stop().await;
}
