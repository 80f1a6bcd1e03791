//! `pinion run [--cpus N] -- CMD ARGS…`: runs a command on CPUs the agent
//! gives it (exclusive for a whole N ≥ 1, the shared pool otherwise).
//!
//! Two processes (design: `docs/design.md`): this one stays as the parent,
//! and starts itself again as a *launcher* (`--exec-as ID`, hidden). The
//! launcher asks the agent to admit the run; the agent identifies the
//! launcher by its socket peer credentials, puts it into the run's cgroup
//! (cpus and mems already set) and answers; only then does the launcher
//! `exec` the command, which so starts pinned. The parent waits, releases
//! the run and exits with the command's status (128 + signal when killed).

use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pinion_api::local::{RunRequest, RUN_ID_PREFIX};
use pinion_api::Client;
use pinion_core::k8s_names;
use pinion_core::qos::{self, vocabulary};
use pinion_core::Quantity;
use tokio::signal::unix::{signal, SignalKind};

use super::local::socket_or_default;

/// Exit status when Pinion itself failed before the command ran.
const EXIT_PINION_FAILED: i32 = 125;
/// Exit status when the command could not be executed.
const EXIT_CANNOT_EXEC: i32 = 126;
/// Exit status when the command was not found.
const EXIT_NOT_FOUND: i32 = 127;

/// Arguments of `pinion run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// CPUs: a whole number ≥ 1 asks for that many exclusive CPUs; any
    /// other quantity (or none) runs in the shared pool.
    // Negative numbers too, so that `--cpus -1` (and any `--cpus=-…`)
    // reaches `check_cpus`, which refuses it naming the value, instead of
    // being clap's "unexpected argument". Not every hyphen value: then
    // `--cpus -- CMD` would take the `--` as the count.
    #[arg(long, allow_negative_numbers = true)]
    cpus: Option<String>,
    /// Memory nodes: `auto` = the memory plugin's when it binds the run,
    /// else left as they are (the parent cgroup's).
    #[arg(long, default_value = "auto")]
    memory_nodes: String,
    /// A request of another resource, served by a resource plugin
    /// (`NAME=QUANTITY`, e.g. `example.com/nic=1`; repeatable).
    #[arg(long = "request", value_name = "NAME=QUANTITY", value_parser = key_value)]
    requests: Vec<(String, String)>,
    /// A pod annotation resource plugins see (`KEY=VALUE`; repeatable).
    #[arg(long = "annotation", value_name = "KEY=VALUE", value_parser = key_value)]
    annotations: Vec<(String, String)>,
    /// Exclusive CPUs from those the kernel isolates at boot (`isolcpus=`):
    /// `require` (only those; refused when too few are free) or `prefer`
    /// (those first). The annotation `pinion.io/isolated-cpus`; needs
    /// `--cpus N`.
    #[arg(long, value_name = "require|prefer", value_parser = ["require", "prefer"])]
    isolated: Option<String>,
    /// `exclusive`: the exclusive CPUs as whole uncore (L3) caches no other
    /// container shares (annotation `pinion.io/uncore`); needs `--cpus N`,
    /// a whole number of caches unless `--uncore-round-up`.
    #[arg(long, value_name = "exclusive", value_parser = ["exclusive"])]
    uncore: Option<String>,
    /// With `--uncore exclusive`: round the CPU count up to whole caches
    /// (the run then gets more CPUs than `--cpus`) instead of refusing it.
    #[arg(long, requires = "uncore")]
    uncore_round_up: bool,
    /// A pod label resource plugins see (`KEY=VALUE`; repeatable).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = key_value)]
    labels: Vec<(String, String)>,
    /// The pod name plugins and podresources consumers see (default: the
    /// run's id).
    #[arg(long)]
    pod_name: Option<String>,
    /// The namespace plugins and podresources consumers see (default
    /// `pinion`).
    #[arg(long)]
    namespace: Option<String>,
    /// Unix socket of the agent's local API.
    #[arg(long, env = "PINION_SOCKET")]
    socket: Option<PathBuf>,
    /// Internal: act as the launcher of run ID.
    #[arg(long, hide = true)]
    exec_as: Option<String>,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// Runs the command; does not return when it ran (exits with its status).
pub fn run(args: &Args) -> anyhow::Result<()> {
    let socket = socket_or_default(args.socket.as_ref());
    if let Some(id) = &args.exec_as {
        launch(args, id, &socket);
    }
    let checked = check_cpus(args.cpus.as_deref())
        .and_then(|()| check_qos(args.cpus.as_deref(), &args.annotations));
    if let Err(why) = checked.and_then(|()| {
        let mut asks = cpu_ask_annotations(args);
        asks.extend(
            (args.annotations.iter())
                .filter(|(key, _)| key.starts_with("pinion.io/"))
                .cloned(),
        );
        check_asks(args.cpus.as_deref(), &asks)
    }) {
        eprintln!("pinion run: {why}");
        std::process::exit(EXIT_PINION_FAILED);
    }
    if let Err(why) = check_meta(args) {
        eprintln!("pinion run: {why}");
        std::process::exit(EXIT_PINION_FAILED);
    }
    let client = Client::new(&socket);
    if let Err(err) = client.health() {
        eprintln!("pinion run: {err}");
        std::process::exit(EXIT_PINION_FAILED);
    }
    let id = run_id();
    let forwarder = forward_signals()?;
    let mut launcher =
        Command::new(std::env::current_exe().context("cannot find the pinion executable")?);
    launcher
        .arg("run")
        .arg("--exec-as")
        .arg(&id)
        .arg("--socket")
        .arg(&socket);
    // Every value in the flag's own word (`--flag=value`): a value that
    // starts with `-` is the flag's, not a flag of its own to the
    // launcher's parser (which exited 2, passed on as the command's code).
    launcher.arg(format!("--memory-nodes={}", args.memory_nodes));
    if let Some(cpus) = &args.cpus {
        launcher.arg(format!("--cpus={cpus}"));
    }
    let mut annotations = args.annotations.clone();
    annotations.extend(cpu_ask_annotations(args));
    for (flag, pairs) in [
        ("--request", &args.requests),
        ("--annotation", &annotations),
        ("--label", &args.labels),
    ] {
        for (key, value) in pairs {
            launcher.arg(format!("{flag}={key}={value}"));
        }
    }
    if let Some(name) = &args.pod_name {
        launcher.arg(format!("--pod-name={name}"));
    }
    if let Some(namespace) = &args.namespace {
        launcher.arg(format!("--namespace={namespace}"));
    }
    let mut child = launcher
        .arg("--")
        .args(&args.command)
        .spawn()
        .context("cannot start the launcher")?;
    forwarder.send(child.id()).ok();
    let status = child.wait().context("waiting for the command")?;
    release(&socket, &id);
    let code = status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(EXIT_PINION_FAILED);
    std::process::exit(code);
}

/// Refuses QoS annotations that would be ignored: a level that is none of
/// katalyst's, contradictory values (the QRM proposal's
/// `kubernetes.io/pod-role` / `kubernetes.io/resource-type` against each
/// other or katalyst's keys), and any `katalyst.kubewharf.io/` or proposal
/// annotation without a CPU request (resource plugins see only pods that request CPUs, so the run
/// would land in the shared pool whatever the annotation says).
fn check_qos(cpus: Option<&str>, annotations: &[(String, String)]) -> Result<(), String> {
    let level = annotations
        .iter()
        .find(|(key, _)| key == qos::QOS_LEVEL_KEY)
        .map(|(_, value)| value.as_str());
    if let Some(level) = level {
        if level.parse::<qos::QosLevel>().is_err() {
            return Err(format!(
                "{}={level}: not a QoS level ({})",
                qos::QOS_LEVEL_KEY,
                qos::QosLevel::names()
            ));
        }
    }
    let map: std::collections::BTreeMap<String, String> = annotations.iter().cloned().collect();
    vocabulary::identity(&std::collections::BTreeMap::new(), &map)
        .map_err(|err| err.to_string())?;
    let qos_key = annotations.iter().find(|(key, _)| {
        qos::is_katalyst_key(key)
            || key == vocabulary::POD_ROLE_ANNOTATION
            || key == vocabulary::RESOURCE_TYPE_ANNOTATION
    });
    if let (None, Some((key, value))) = (cpus, qos_key) {
        let dedicated = qos::parse(&map).is_ok_and(|r| r.level == qos::QosLevel::DedicatedCores);
        let example = if dedicated { "--cpus 2" } else { "--cpus 500m" };
        return Err(format!(
            "--annotation {key}={value} needs a CPU request, or the resource plugins never see \
             the run: add {example} ({} and {} take a fraction such as 500m, {} a whole number)",
            qos::QosLevel::SharedCores,
            qos::QosLevel::ReclaimedCores,
            qos::QosLevel::DedicatedCores
        ));
    }
    Ok(())
}

/// The annotations `--isolated`, `--uncore` and `--uncore-round-up` stand
/// for (`pinion_core::policy::cpu_ask`).
fn cpu_ask_annotations(args: &Args) -> Vec<(String, String)> {
    use pinion_core::policy::cpu_ask::{ISOLATED_CPUS, UNCORE, UNCORE_ROUND_UP};
    let mut out = Vec::new();
    if let Some(value) = &args.isolated {
        out.push((ISOLATED_CPUS.to_owned(), value.clone()));
    }
    if let Some(value) = &args.uncore {
        out.push((UNCORE.to_owned(), value.clone()));
    }
    if args.uncore_round_up {
        out.push((UNCORE_ROUND_UP.to_owned(), "true".to_owned()));
    }
    out
}

/// Refuses a `--cpus` the agent would refuse: not a Kubernetes quantity
/// (negative included), or zero.
fn check_cpus(cpus: Option<&str>) -> Result<(), String> {
    let Some(text) = cpus else { return Ok(()) };
    match Quantity::parse(text) {
        Err(err) => Err(format!("--cpus {text}: {err}")),
        Ok(quantity) if quantity.is_zero() => {
            Err(format!("--cpus {text}: must be greater than zero"))
        }
        Ok(_) => Ok(()),
    }
}

/// Refuses a pod name, namespace, label or annotation Kubernetes' API
/// server would refuse, as the agent does (`pinion_core::k8s_names`), before
/// the agent is asked. The pod name, when not given, is the run's id.
fn check_meta(args: &Args) -> Result<(), String> {
    let flag = |flag: &str, err: k8s_names::MetaError| format!("{flag}: {err}");
    if let Some(name) = &args.pod_name {
        k8s_names::check_pod_name(name).map_err(|err| flag("--pod-name", err))?;
    }
    if let Some(namespace) = &args.namespace {
        k8s_names::check_namespace(namespace).map_err(|err| flag("--namespace", err))?;
    }
    k8s_names::check_labels(args.labels.iter().map(|(k, v)| (k, v)))
        .map_err(|err| flag("--label", err))?;
    k8s_names::check_annotations(args.annotations.iter().map(|(k, v)| (k, v)))
        .map_err(|err| flag("--annotation", err))
}

/// Whether the run asks for exclusive CPUs: a whole `--cpus` N ≥ 1, and no
/// QoS annotation asking for another level than `dedicated_cores` (a
/// `shared_cores` run with a whole N is the resource plugins' to place).
fn asks_exclusive(cpus: Option<&str>, annotations: &[(String, String)]) -> bool {
    let whole = cpus
        .and_then(|text| Quantity::parse(text).ok())
        .is_some_and(|q| !q.is_zero() && q.is_integral());
    let map: std::collections::BTreeMap<String, String> = annotations.iter().cloned().collect();
    let other_level = qos::parse(&map)
        .is_ok_and(|r| r.level_explicit && r.level != qos::QosLevel::DedicatedCores);
    whole && !other_level
}

/// Refuses an admission that did not give the exclusive CPUs asked for:
/// the agent answered with the shared pool (its policy is `none`, or
/// another that gives no exclusive CPUs). CPUs a resource plugin chose
/// (`pool` `plugin`) are the plugin's answer to the request and taken.
fn check_admitted(
    cpus: Option<&str>,
    annotations: &[(String, String)],
    admitted: &pinion_api::local::Admitted,
) -> Result<(), String> {
    if !asks_exclusive(cpus, annotations) || admitted.exclusive || admitted.pool == "plugin" {
        return Ok(());
    }
    let pool = if admitted.pool.is_empty() {
        "shared"
    } else {
        &admitted.pool
    };
    Err(format!(
        "--cpus {} asks for exclusive CPUs, but the agent placed the run in the {pool} pool \
         (cpus {}): its CPU manager policy gives no exclusive CPUs (e.g. cpuManagerPolicy: \
         none; `pinion ps` shows the policy); the command was not started. Run it with a \
         fractional --cpus (e.g. 1500m) or without --cpus to run in the shared pool",
        cpus.unwrap_or_default(),
        admitted.cpus
    ))
}

/// Refuses `--isolated` / `--uncore` (or their annotations) without a whole
/// `--cpus`: they shape exclusive CPUs, which a shared-pool run never gets.
/// "Whole" is the agent's test (kubelet's: `1000m` and `1.0` are whole).
fn check_asks(cpus: Option<&str>, asks: &[(String, String)]) -> Result<(), String> {
    let whole = cpus
        .and_then(|text| Quantity::parse(text).ok())
        .is_some_and(|q| !q.is_zero() && q.is_integral());
    match asks.first() {
        Some((key, value)) if !whole => Err(format!(
            "{key}={value} shapes exclusive CPUs: add --cpus N with a whole N ≥ 1"
        )),
        _ => Ok(()),
    }
}

/// The launcher: admit and place this process, then become the command.
fn launch(args: &Args, id: &str, socket: &Path) -> ! {
    let request = RunRequest {
        cpus: args.cpus.clone(),
        memory_nodes: args.memory_nodes.clone(),
        requests: args.requests.iter().cloned().collect(),
        annotations: args.annotations.iter().cloned().collect(),
        labels: args.labels.iter().cloned().collect(),
        pod_name: args.pod_name.clone(),
        namespace: args.namespace.clone(),
        ..RunRequest::new(id)
    };
    let admitted = match Client::new(socket).run(&request) {
        Ok(admitted) => admitted,
        Err(err) => {
            eprintln!("pinion run: {err}");
            std::process::exit(EXIT_PINION_FAILED);
        }
    };
    // The parent releases the run when this launcher exits.
    if let Err(why) = check_admitted(args.cpus.as_deref(), &args.annotations, &admitted) {
        eprintln!("pinion run: {why}");
        std::process::exit(EXIT_PINION_FAILED);
    }
    if let Some(adj) = admitted.resources.oom_score_adj {
        // Inherited by the command: the launcher becomes it.
        if let Err(err) = std::fs::write("/proc/self/oom_score_adj", adj.to_string()) {
            eprintln!("pinion run: cannot set the OOM score adjustment {adj}: {err}");
            std::process::exit(EXIT_PINION_FAILED);
        }
    }
    let Some((program, rest)) = args.command.split_first() else {
        eprintln!("pinion run: no command given");
        std::process::exit(EXIT_PINION_FAILED);
    };
    // The resource plugins' environment variables, as the runtime would set
    // them for a container.
    let err = Command::new(program).args(rest).envs(&admitted.env).exec();
    eprintln!("pinion run: cannot execute {program:?}: {err}");
    let code = if err.kind() == std::io::ErrorKind::NotFound {
        EXIT_NOT_FOUND
    } else {
        EXIT_CANNOT_EXEC
    };
    std::process::exit(code);
}

/// `KEY=VALUE` as a pair (the key must not be empty).
fn key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

fn run_id() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let (secs, nanos) = (now.as_secs(), now.subsec_nanos());
    format!("{RUN_ID_PREFIX}{}-{secs}-{nanos}", std::process::id())
}

fn release(socket: &Path, id: &str) {
    match Client::new(socket).release(id) {
        Ok(_) => {}
        Err(err) => eprintln!(
            "pinion run: could not release {id} ({err}); the agent releases it when it runs again"
        ),
    }
}

/// Keeps this parent alive through SIGINT (the terminal sends it to the
/// command too) and forwards SIGTERM and SIGHUP to the launched command,
/// so the parent can always release the CPUs. Returns where to send the
/// child's pid.
fn forward_signals() -> anyhow::Result<std::sync::mpsc::Sender<u32>> {
    let (pid_tx, pid_rx) = std::sync::mpsc::channel::<u32>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::io::Result<()>>();
    std::thread::Builder::new()
        .name("pinion-run-signals".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(err) => {
                    let _ = ready_tx.send(Err(err));
                    return;
                }
            };
            runtime.block_on(async move {
                let installed = (
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::terminate()),
                    signal(SignalKind::hangup()),
                );
                let (Ok(mut int), Ok(mut term), Ok(mut hup)) = installed else {
                    let _ =
                        ready_tx.send(Err(std::io::Error::other("cannot install signal handlers")));
                    return;
                };
                let _ = ready_tx.send(Ok(()));
                let Ok(pid) = pid_rx.recv() else { return };
                loop {
                    let signal = tokio::select! {
                        _ = int.recv() => continue,
                        _ = term.recv() => Signal::SIGTERM,
                        _ = hup.recv() => Signal::SIGHUP,
                    };
                    if let Err(why) = forward(pid, signal) {
                        eprintln!("pinion run: {why}");
                    }
                }
            });
        })
        .context("cannot start the signal thread")?;
    ready_rx
        .recv()
        .context("signal thread ended early")?
        .context("cannot install signal handlers")?;
    Ok(pid_tx)
}

/// Sends `signal` to the command (kill(2) itself: no `kill` program is
/// needed, which minimal images lack). A command that has already ended
/// is not an error.
fn forward(pid: u32, signal: Signal) -> Result<(), String> {
    let target = i32::try_from(pid).map(Pid::from_raw).map_err(|_| {
        format!("cannot forward {signal} to the command: pid {pid} is out of range")
    })?;
    match kill(target, signal) {
        Ok(()) | Err(Errno::ESRCH) => Ok(()),
        Err(err) => Err(format!(
            "cannot forward {signal} to the command (pid {pid}): {err}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotation(key: &str, value: &str) -> Vec<(String, String)> {
        vec![(key.to_string(), value.to_string())]
    }

    #[test]
    fn qos_annotations_without_cpus_are_refused_with_the_fix() {
        let reclaimed = annotation(qos::QOS_LEVEL_KEY, "reclaimed_cores");
        let why = check_qos(None, &reclaimed).expect_err("no cpus");
        assert!(why.contains("add --cpus 500m"), "{why}");
        let dedicated = annotation(qos::QOS_LEVEL_KEY, "dedicated_cores");
        let why = check_qos(None, &dedicated).expect_err("no cpus");
        assert!(why.contains("add --cpus 2"), "{why}");
        assert_eq!(check_qos(Some("500m"), &reclaimed), Ok(()));
    }

    #[test]
    fn an_unknown_qos_level_is_refused_with_the_known_ones() {
        let gold = annotation(qos::QOS_LEVEL_KEY, "gold");
        let why = check_qos(Some("1"), &gold).expect_err("gold");
        assert!(
            why.contains("gold") && why.contains("reclaimed_cores"),
            "{why}"
        );
    }

    #[test]
    fn the_proposals_keys_need_cpus_and_must_agree_with_katalysts() {
        let role = annotation(qos::vocabulary::POD_ROLE_ANNOTATION, "storage-service");
        let why = check_qos(None, &role).expect_err("no cpus");
        assert!(
            why.contains("kubernetes.io/pod-role=storage-service"),
            "{why}"
        );
        assert!(why.contains("add --cpus 2"), "{why}");
        assert_eq!(check_qos(Some("2"), &role), Ok(()));
        let mut both = role.clone();
        both.extend(annotation(qos::QOS_LEVEL_KEY, "shared_cores"));
        let why = check_qos(Some("2"), &both).expect_err("contradiction");
        assert!(
            why.contains("kubernetes.io/pod-role: \"storage-service\"")
                && why.contains("katalyst.kubewharf.io/qos_level: \"shared_cores\""),
            "{why}"
        );
    }

    #[test]
    fn cpu_asks_need_whole_exclusive_cpus() {
        let isolated = annotation("pinion.io/isolated-cpus", "require");
        for cpus in [
            None,
            Some("500m"),
            Some("0"),
            Some("0m"),
            Some("1.5"),
            Some("two"),
        ] {
            let err = check_asks(cpus, &isolated).unwrap_err();
            assert!(err.contains("pinion.io/isolated-cpus=require"), "{err}");
            assert!(err.contains("--cpus N"), "{err}");
        }
        assert_eq!(check_asks(Some("2"), &isolated), Ok(()));
        assert_eq!(check_asks(None, &[]), Ok(()));
    }

    #[test]
    fn regression_whole_cpus_written_as_1000m_or_1_0_were_refused_for_cpu_asks() {
        let isolated = annotation("pinion.io/isolated-cpus", "prefer");
        for cpus in ["1000m", "2000m", "1.0", "+1", "1e0"] {
            assert_eq!(check_asks(Some(cpus), &isolated), Ok(()), "{cpus}");
        }
    }

    #[test]
    fn regression_negative_cpus_were_not_refused_by_pinion_run_itself() {
        for cpus in ["-1", "-1.5", "-500m"] {
            let why = check_cpus(Some(cpus)).expect_err(cpus);
            assert_eq!(
                why,
                format!(
                    "--cpus {cpus}: invalid quantity \"{cpus}\": negative values are not allowed"
                )
            );
        }
        let why = check_cpus(Some("0")).expect_err("zero");
        assert_eq!(why, "--cpus 0: must be greater than zero");
        assert_eq!(check_cpus(Some("500m")), Ok(()));
        assert_eq!(check_cpus(None), Ok(()));
    }

    #[test]
    fn regression_forwarding_a_signal_needed_the_kill_program() {
        // A child of this test, so the pid cannot be another's.
        let mut child = Command::new("sleep").arg("600").spawn().expect("sleep");
        let forwarded = forward(child.id(), Signal::SIGTERM);
        let status = child.wait().expect("wait");
        assert_eq!(forwarded, Ok(()));
        assert_eq!(status.signal(), Some(Signal::SIGTERM as i32));
    }

    #[test]
    fn other_annotations_need_no_cpus() {
        assert_eq!(
            check_qos(None, &annotation("example.com/team", "a")),
            Ok(())
        );
        assert_eq!(check_qos(None, &[]), Ok(()));
    }

    fn answer(exclusive: bool, pool: &str) -> pinion_api::local::Admitted {
        pinion_api::local::Admitted {
            pod: "pinion-run-1".into(),
            container: "main".into(),
            cpus: "0-3".into(),
            exclusive,
            mems: String::new(),
            cgroup: Some("pinion-run-1".into()),
            pool: pool.into(),
            env: std::collections::BTreeMap::new(),
            annotations: std::collections::BTreeMap::new(),
            resources: pinion_api::local::Resources::default(),
        }
    }

    /// `pinion run --cpus 2` ran the command in the shared pool when the
    /// agent's policy gave no exclusive CPUs (policy `none`): the answer's
    /// `exclusive` was not looked at.
    #[test]
    fn regression_a_shared_answer_to_whole_cpus_was_run_silently() {
        let shared = answer(false, "shared");
        let why = check_admitted(Some("2"), &[], &shared).expect_err("not exclusive");
        assert!(
            why.starts_with("--cpus 2 asks for exclusive CPUs, but the agent placed the run in the shared pool (cpus 0-3)"),
            "{why}"
        );
        assert!(why.contains("the command was not started"), "{why}");
        // An agent without the pool field.
        assert!(check_admitted(Some("1000m"), &[], &answer(false, "")).is_err());
        // Asked for the shared pool, or answered by exclusive or plugin CPUs.
        for cpus in [None, Some("1500m"), Some("0.5")] {
            assert_eq!(check_admitted(cpus, &[], &shared), Ok(()), "{cpus:?}");
        }
        assert_eq!(
            check_admitted(Some("2"), &[], &answer(true, "exclusive")),
            Ok(())
        );
        assert_eq!(
            check_admitted(Some("2"), &[], &answer(false, "plugin")),
            Ok(())
        );
        let shared_cores = annotation(qos::QOS_LEVEL_KEY, "shared_cores");
        assert_eq!(check_admitted(Some("2"), &shared_cores, &shared), Ok(()));
        let dedicated = annotation(qos::QOS_LEVEL_KEY, "dedicated_cores");
        assert!(check_admitted(Some("2"), &dedicated, &shared).is_err());
    }
}
