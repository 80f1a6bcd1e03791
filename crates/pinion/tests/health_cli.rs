//! `pinion health [--ready]` against the real agent (on a real machine's
//! sysfs tree from `../shared`, cgroups in a plain directory): exit 0 and
//! `ok` while the agent answers on its socket, 1 naming the socket when
//! nothing does. The DaemonSet's exec probes run exactly this.

mod common;

const MACHINE: &str = "topologies/x86-2s-intel-xeon-silver-4108-ht";

#[test]
fn health_and_ready_answer_on_the_local_api_socket() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let agent = common::SysrootAgent::start(&machine, "cpuManagerPolicy: none\n");
    let socket = agent.socket();
    let socket = socket.to_str().expect("utf-8");
    for args in [
        vec!["health", "--socket", socket],
        vec!["health", "--ready", "--socket", socket],
    ] {
        let out = common::pinion(&args);
        assert!(out.status.success(), "{args:?}: {}", common::stderr(&out));
        assert_eq!(common::stdout(&out), "ok\n", "{args:?}");
    }
}

#[test]
fn health_fails_with_status_1_when_no_agent_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("pinion.sock");
    let out = common::pinion(&["health", "--socket", socket.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = common::stderr(&out);
    assert!(stderr.contains("cannot reach the pinion agent"), "{stderr}");
    assert!(stderr.contains(&socket.display().to_string()), "{stderr}");
}

/// `pinion health` had no `env = "PINION_SOCKET"` on `--socket`, unlike
/// every other command that talks to the agent: a probe relying on the
/// variable asked the default socket and reported the agent down.
#[test]
fn regression_health_ignored_pinion_socket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("from-env.sock");
    for args in [&["health"][..], &["health", "--ready"]] {
        let out = std::process::Command::new(common::BIN)
            .args(args)
            .env("PINION_SOCKET", &socket)
            .output()
            .expect("pinion runs");
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = common::stderr(&out);
        assert!(
            stderr.contains(&socket.display().to_string()),
            "{args:?}: {stderr}"
        );
    }
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let agent = common::SysrootAgent::start(&machine, "cpuManagerPolicy: none\n");
    for args in [&["health"][..], &["health", "--ready"]] {
        let out = std::process::Command::new(common::BIN)
            .args(args)
            .env("PINION_SOCKET", agent.socket())
            .output()
            .expect("pinion runs");
        assert!(out.status.success(), "{args:?}: {}", common::stderr(&out));
        assert_eq!(common::stdout(&out), "ok\n", "{args:?}");
    }
}
