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
