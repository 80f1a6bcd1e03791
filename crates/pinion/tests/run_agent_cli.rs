//! `pinion run` and `pinion resize` against the real agent (`pinion agent`
//! on a real machine's sysfs tree from `../shared`, cgroups in a plain
//! directory declared as cgroup v2): what the CLI does with the agent's
//! answers and refusals.

mod common;

const MACHINE: &str = "topologies/x86-2s-intel-xeon-silver-4108-ht";

fn pinion_at(agent: &common::SysrootAgent, args: &[&str]) -> std::process::Output {
    let socket = agent.socket();
    let mut all = args.to_vec();
    let command = all.iter().position(|a| *a == "--").unwrap_or(all.len());
    all.splice(
        command..command,
        ["--socket", socket.to_str().expect("utf-8")],
    );
    common::pinion(&all)
}

/// `pinion run --cpus 2` ran its command in the shared pool without a word
/// when the agent gave no exclusive CPUs (`cpuManagerPolicy: none`): the
/// answer's `exclusive: false` was not looked at. Now it refuses, exit 125,
/// the command not started and the run released; a shared run still runs.
#[test]
fn regression_a_shared_answer_to_whole_cpus_ran_the_command() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let agent = common::SysrootAgent::start(&machine, "cpuManagerPolicy: none\n");
    let marker = agent.dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let out = pinion_at(&agent, &["run", "--cpus", "2", "--", "sh", "-c", &touch]);
    let stderr = common::stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains(
            "--cpus 2 asks for exclusive CPUs, but the agent placed the run in the shared pool"
        ),
        "{stderr}"
    );
    assert!(!marker.exists(), "the command did not run");
    // Released by the parent (the fake cgroup keeps the launcher's pid, so
    // the agent keeps the cgroup as a shared member until reconcile).
    assert!(!stderr.contains("could not release"), "{stderr}");
    let ps = pinion_api::Client::new(&agent.socket()).ps().expect("ps");
    assert!(ps.assignments.is_empty(), "{:?}", ps.assignments);

    let out = pinion_at(&agent, &["run", "--cpus", "500m", "--", "sh", "-c", &touch]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(marker.exists(), "a shared run runs");
}

/// `pinion resize ../x` answered `404 no admitted container matches pod
/// ../x`, where a run with that id is `400 invalid cgroup name`.
#[test]
fn regression_resize_of_an_invalid_id_was_not_found() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let agent = common::SysrootAgent::start(
        &machine,
        "cpuManagerPolicy: static\nreservedSystemCPUs: \"0,16\"\nfeatureGates:\n  InPlacePodVerticalScalingExclusiveCPUs: true\n",
    );
    for id in ["../x", "a/b"] {
        let out = pinion_at(&agent, &["resize", id, "--cpus", "2"]);
        let stderr = common::stderr(&out);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains("the pinion agent refused (400): invalid cgroup name"),
            "{id}: {stderr}"
        );
    }
    let out = pinion_at(&agent, &["resize", "pinion-run-none", "--cpus", "2"]);
    let stderr = common::stderr(&out);
    assert!(stderr.contains("(404)"), "{stderr}");
}

/// Found from outside (session 46): `pinion run` passed each value to its
/// launcher as a word of its own (`--request -x=1`), so a value starting
/// with `-` was taken for a flag by the launcher's parser, which exited 2;
/// that code was passed on as the command's own. Each value now goes in
/// its flag's word (`--request=-x=1`).
#[test]
fn regression_a_value_starting_with_a_dash_reaches_the_launcher() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let agent = common::SysrootAgent::start(&machine, "cpuManagerPolicy: none\n");
    let marker = agent.dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let out = pinion_at(&agent, &["run", "--request=-x=1", "--", "sh", "-c", &touch]);
    let stderr = common::stderr(&out);
    assert_ne!(
        out.status.code(),
        Some(2),
        "the launcher's parser: {stderr}"
    );
    assert!(!stderr.contains("unexpected argument"), "{stderr}");
    assert!(out.status.success(), "{stderr}");
    assert!(marker.exists(), "the command ran");
}
