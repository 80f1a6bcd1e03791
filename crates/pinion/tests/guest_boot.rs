//! What the end-to-end beds' guest runner (`e2e_run_guest` in
//! `scripts/e2e/vm.sh`) does with a guest that hangs before its `/init`:
//! it stops it after `PINION_E2E_BOOT_LIMIT` seconds and boots it once
//! more. qemu is a stand-in on `PATH` here (a script writing what a guest
//! kernel would to the serial console file), so the runner's decision is
//! what is tested, on any machine, without root.

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Output};

use common::{stderr, workspace};

/// A stand-in `qemu-system-x86_64` in `dir`: appends `console` (a shell
/// `printf` format) to the `-serial file:` path it is given, counts its
/// boots in `dir/boots` and its arguments, one a line, in `dir/args`, then
/// runs `then` (`exec sleep 600`: a guest that hangs;
/// `exit 0`: one that powered off).
fn fake_qemu(dir: &Path, console: &str, then: &str) {
    let script = format!(
        "#!/bin/sh\n\
         for a in \"$@\"; do case $a in file:*) log=${{a#file:}} ;; esac; done\n\
         echo boot >>'{boots}'\n\
         printf '%s\\n' \"$@\" >'{args}'\n\
         printf '{console}' >>\"$log\"\n\
         {then}\n",
        boots = dir.join("boots").display(),
        args = dir.join("args").display(),
    );
    let path = dir.join("qemu-system-x86_64");
    std::fs::write(&path, script).expect("stand-in qemu");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// One run of `e2e_run_guest` against the stand-in qemu: its work directory
/// and what the runner printed.
struct Run {
    dir: tempfile::TempDir,
    out: Output,
}

impl Run {
    /// The runner's exit status (the script prints it last).
    fn status(&self) -> String {
        let stdout = String::from_utf8_lossy(&self.out.stdout);
        let status = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("status="))
            .next_back();
        status.unwrap_or("none").to_string()
    }

    /// What the runner logged (stderr).
    fn log(&self) -> String {
        stderr(&self.out)
    }

    /// How many times qemu was started.
    fn boots(&self) -> usize {
        std::fs::read_to_string(self.dir.path().join("boots"))
            .unwrap_or_default()
            .lines()
            .count()
    }

    /// The kernel command line qemu was given last, from the stand-in's
    /// record of its arguments.
    fn kernel_command_line(&self) -> String {
        let args = std::fs::read_to_string(self.dir.path().join("args")).expect("qemu's arguments");
        let args: Vec<&str> = args.lines().collect();
        let at = args
            .iter()
            .position(|a| *a == "-append")
            .expect("an -append");
        args[at + 1].to_string()
    }
}

/// `e2e_run_guest` with a stand-in qemu (`fake_qemu(console, then)`) first
/// on `PATH`, a boot limit of 2 s, TCG without a KVM probe, TCG's thread
/// mode `threads` (`single`|`multi`) and `loglevel` on the console; no
/// silence watch.
fn run_guest(console: &str, then: &str, loglevel: &str, threads: &str) -> Run {
    run_guest_watched(console, then, loglevel, threads, "0")
}

/// [`run_guest`] with the silence watch's limit `silent` (seconds; `0`:
/// off).
fn run_guest_watched(
    console: &str,
    then: &str,
    loglevel: &str,
    threads: &str,
    silent: &str,
) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    fake_qemu(dir.path(), console, then);
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = format!(
        "set -u\n. '{lib}/lib.sh'\n. '{lib}/vm.sh'\n\
         E2E_WORK='{work}'\n\
         e2e_run_guest '{work}/guest.console' /dev/null 60 '' -smp 2\n\
         echo \"status=$?\"\n",
        lib = workspace().join("scripts/e2e").display(),
        work = dir.path().display(),
    );
    let out = Command::new("bash")
        .args(["-c", &script])
        .env("PATH", path)
        .env("PINION_E2E_ACCEL", "tcg")
        .env("PINION_E2E_KERNEL", "/dev/null")
        .env("PINION_E2E_CACHE", dir.path().join("cache"))
        .env("PINION_E2E_BOOT_LIMIT", "2")
        .env("PINION_E2E_LOGLEVEL", loglevel)
        .env("PINION_E2E_SILENT_LIMIT", silent)
        .env("PINION_E2E_TCG_THREAD", threads)
        .output()
        .expect("bash runs");
    Run { dir, out }
}

/// Regression (CI, 2026-12-04): at `PINION_E2E_LOGLEVEL=4` the guest
/// kernel prints a warning within its first half second (`RETBleed:
/// WARNING: …` under TCG's Skylake-Server); the runner took any byte on the
/// console for a booted guest, so the cluster bed's pinion-smt, hung after
/// that line, was left to the 15-minute silence watch instead of being
/// booted again, and the bed failed. Only a line of the guest's `/init`
/// counts.
#[test]
fn regression_a_guest_hung_after_kernel_warnings_is_booted_again() {
    let run = run_guest(
        "[    0.010940] RETBleed: WARNING: Spectre v2 mitigation leaves CPU vulnerable\\n",
        "exec sleep 600",
        "4",
        "multi",
    );
    let log = run.log();
    assert_eq!(
        run.status(),
        "124",
        "two hung boots end as timed out: {log}"
    );
    assert_eq!(run.boots(), 2, "{log}");
    assert!(
        log.contains("guest boot 1: no line of /init on the console within 2 s")
            && log.contains("guest boot 2: no line of /init"),
        "each hung boot is said: {log}"
    );
    assert!(
        log.contains("no init | [    0.010940] RETBleed"),
        "the kernel's last lines are on stderr: {log}"
    );
    let kept = std::fs::read_to_string(run.dir.path().join("guest.console.noinit1"))
        .expect("the first boot's console is kept");
    assert!(kept.contains("RETBleed"), "{kept}");
}

/// A guest whose `/init` writes its first line after the kernel's warnings
/// is booted once, and the runner returns qemu's status.
#[test]
fn a_guest_that_reaches_its_init_is_booted_once() {
    let run = run_guest(
        "[    0.010940] RETBleed: WARNING\\nE2E-BEGIN shape=test\\nE2E-END\\n",
        "exit 0",
        "4",
        "multi",
    );
    let log = run.log();
    assert_eq!(run.status(), "0", "{log}");
    assert_eq!(run.boots(), 1, "{log}");
    assert!(!log.contains("no line of /init"), "{log}");
}

/// Regression (2026-12-04, after the hang above): the guest hung before
/// its `/init` because the kernel's late initcalls patch the first
/// instruction of `sched_clock_idle_wakeup_event` (the `__sched_clock_stable`
/// key) while the other vCPUs of multi-threaded TCG run it. Such a guest
/// boots with one CPU (`maxcpus=1`; `/init` brings the rest online); under
/// single-threaded TCG, where the vCPUs take turns, it boots with all.
#[test]
fn regression_a_multi_threaded_guest_boots_with_one_cpu_up() {
    for (threads, one_cpu) in [("multi", true), ("single", false)] {
        let run = run_guest("E2E-BEGIN shape=test\\nE2E-END\\n", "exit 0", "3", threads);
        assert_eq!(run.status(), "0", "{}", run.log());
        let line = run.kernel_command_line();
        assert_eq!(
            line.split_whitespace().any(|w| w == "maxcpus=1"),
            one_cpu,
            "{threads}-threaded TCG: {line}"
        );
    }
}

/// Regression (noticed 2026-12-04): a guest the silence watch
/// (`PINION_E2E_SILENT_LIMIT`) stopped came back with status 0, because
/// qemu ends with 0 on SIGTERM; the beds then said "the guest did not
/// finish (qemu status 0)", as of a guest that powered off. It is 124, as a
/// guest stopped at its time limit, with its vCPUs' report kept.
#[test]
fn regression_a_guest_stopped_by_the_silence_watch_is_not_status_0() {
    // Like qemu: SIGTERM ends it with 0.
    let run = run_guest_watched(
        "E2E-BEGIN shape=test\\n",
        "trap 'exit 0' TERM; sleep 600 & wait",
        "3",
        "single",
        "10",
    );
    let log = run.log();
    assert_eq!(run.status(), "124", "{log}");
    assert_eq!(run.boots(), 1, "{log}");
    assert!(
        log.contains("guest console silent for 10 s"),
        "the stop is said: {log}"
    );
    assert!(
        run.dir.path().join("guest.console.stall").exists(),
        "the vCPUs' report is kept: {log}"
    );
}
