//! `pinion run`'s own checks of its arguments, made before any agent is
//! asked (so these tests need none: the socket named does not exist, and a
//! run whose arguments pass the checks stops at "cannot reach the agent").

mod common;

/// `pinion run --socket MISSING ARGS… -- true`.
fn run(socket: &std::path::Path, args: &[&str]) -> std::process::Output {
    let socket = socket.to_str().expect("utf-8");
    let mut all = vec!["run", "--socket", socket];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "true"]);
    common::pinion(&all)
}

/// `check_asks` tested `--cpus` with `parse::<u32>()`: `1000m`, `2000m`
/// and `1.0`, which the agent admits as whole exclusive CPUs (kubelet's
/// integral test), were refused with "add --cpus N with a whole N ≥ 1".
#[test]
fn regression_whole_cpus_not_written_as_an_integer_were_refused_for_cpu_asks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("pinion.sock");
    for args in [
        &["--cpus", "1000m", "--isolated", "prefer"][..],
        &["--cpus", "2000m", "--isolated", "require"],
        &[
            "--cpus",
            "1.0",
            "--uncore",
            "exclusive",
            "--uncore-round-up",
        ],
        &["--cpus", "+1", "--uncore", "exclusive"],
    ] {
        let out = run(&socket, args);
        let stderr = common::stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("shapes exclusive CPUs"),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains("cannot reach the pinion agent"),
            "{args:?}: {stderr}"
        );
    }
    for cpus in ["1500m", "1.5", "0.5"] {
        let out = run(&socket, &["--cpus", cpus, "--isolated", "prefer"]);
        let stderr = common::stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{cpus}: {stderr}");
        assert!(
            stderr.contains("pinion.io/isolated-cpus=prefer shapes exclusive CPUs"),
            "{cpus}: {stderr}"
        );
    }
}

/// `--cpus=-1` was a clap error ("unexpected argument '-1' found", with the
/// tip to write `-- -1`, which in `pinion run` makes it the command).
#[test]
fn regression_negative_cpus_were_a_parse_error_with_a_wrong_tip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("pinion.sock");
    for (args, value) in [
        (&["--cpus=-1"][..], "-1"),
        (&["--cpus=-1.5"], "-1.5"),
        (&["--cpus", "-1"], "-1"),
        (&["--cpus", "-1.5"], "-1.5"),
        (&["--cpus=-500m"], "-500m"),
    ] {
        let out = run(&socket, args);
        let stderr = common::stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("unexpected argument"),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("--cpus {value}: invalid quantity \"{value}\""))
                && stderr.contains("negative values are not allowed"),
            "{args:?}: {stderr}"
        );
    }
}

/// A forgotten count is still clap's "a value is required", not the `--`
/// that starts the command taken as the count.
#[test]
fn cpus_without_a_value_before_the_command_is_a_missing_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run(&dir.path().join("pinion.sock"), &["--cpus"]);
    let stderr = common::stderr(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("a value is required for '--cpus"),
        "{stderr}"
    );
}

#[test]
fn zero_and_malformed_cpus_are_refused_naming_the_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("pinion.sock");
    for (cpus, why) in [
        ("0", "must be greater than zero"),
        ("0m", "must be greater than zero"),
        ("two", "invalid quantity \"two\""),
    ] {
        let out = run(&socket, &["--cpus", cpus]);
        let stderr = common::stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{cpus}: {stderr}");
        assert!(
            stderr.contains(&format!("--cpus {cpus}: ")) && stderr.contains(why),
            "{cpus}: {stderr}"
        );
    }
}

/// `pinion run --pod-name "" --namespace ../.. --label "bad key!=v"` was
/// sent to the agent, which admitted it and showed it to podresources
/// consumers; now `pinion run` refuses such metadata as Kubernetes' API
/// server would, naming the flag and the value, before any agent is asked.
#[test]
fn regression_pod_metadata_kubernetes_refuses_was_sent_to_the_agent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("pinion.sock");
    let huge = format!("app={}", "v".repeat(100_000));
    let long_namespace = "a".repeat(64);
    for (args, want) in [
        (&["--pod-name", ""][..], "--pod-name: pod name \"\": empty"),
        (
            &["--pod-name", "Web_1"],
            "--pod-name: pod name \"Web_1\": not a DNS-1123 subdomain",
        ),
        (
            &["--namespace", "../.."],
            "--namespace: namespace \"../..\": not a DNS-1123 label",
        ),
        (
            &["--namespace", &long_namespace],
            "64 characters, at most 63 are allowed",
        ),
        (
            &["--label", "bad key!=v"],
            "--label: label key \"bad key!\"",
        ),
        (&["--label", &huge], "--label: label \"app\": value \"vvv"),
        (
            &["--annotation", "no good=v"],
            "--annotation: annotation key \"no good\"",
        ),
    ] {
        let out = run(&socket, args);
        let stderr = common::stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{want}: {stderr}");
        assert!(stderr.contains(want), "{want}: {stderr}");
        assert!(stderr.len() < 600, "the value is cut: {stderr}");
        assert!(!stderr.contains("cannot reach"), "{want}: {stderr}");
    }
    let out = run(
        &socket,
        &[
            "--pod-name",
            "web-1",
            "--namespace",
            "team-a",
            "--label",
            "example.com/tier=",
            "--label",
            "App_1=V1.2",
        ],
    );
    let stderr = common::stderr(&out);
    assert!(stderr.contains("cannot reach the pinion agent"), "{stderr}");
}
