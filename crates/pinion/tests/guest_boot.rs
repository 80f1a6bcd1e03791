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

/// `e2e_run_guest` with the stand-in qemu of `dir` first on `PATH`, a boot
/// limit of 2 s, TCG without a KVM probe, and `loglevel` on the console.
/// Prints the runner's status last on stdout.
fn run_guest(dir: &Path, loglevel: &str) -> Output {
    run_guest_threads(dir, loglevel, "multi")
}

/// As `run_guest`, with TCG's thread mode `threads` (`single`|`multi`).
fn run_guest_threads(dir: &Path, loglevel: &str, threads: &str) -> Output {
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = format!(
        "set -u\n. '{lib}/lib.sh'\n. '{lib}/vm.sh'\n\
         E2E_WORK='{work}'\n\
         e2e_run_guest '{work}/guest.console' /dev/null 60 '' -smp 2\n\
         echo \"status=$?\"\n",
        lib = workspace().join("scripts/e2e").display(),
        work = dir.display(),
    );
    Command::new("bash")
        .args(["-c", &script])
        .env("PATH", path)
        .env("PINION_E2E_ACCEL", "tcg")
        .env("PINION_E2E_KERNEL", "/dev/null")
        .env("PINION_E2E_CACHE", dir.join("cache"))
        .env("PINION_E2E_BOOT_LIMIT", "2")
        .env("PINION_E2E_LOGLEVEL", loglevel)
        .env("PINION_E2E_SILENT_LIMIT", "0")
        .env("PINION_E2E_TCG_THREAD", threads)
        .output()
        .expect("bash runs")
}

fn boots(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("boots"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// Regression (CI, 2026-12-04): at `PINION_E2E_LOGLEVEL=4` the guest
/// kernel prints a warning within its first 0.1 s (`RETBleed: WARNING: …`
/// under TCG's Skylake-Server); the runner took any byte on the console
/// for a booted guest, so the cluster bed's pinion-smt, hung after that
/// line, was left to the 15-minute silence watch instead of being booted
/// again, and the bed failed. Only a line of the guest's `/init` counts.
#[test]
fn regression_a_guest_hung_after_kernel_warnings_is_booted_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    fake_qemu(
        dir.path(),
        "[    0.010940] RETBleed: WARNING: Spectre v2 mitigation leaves CPU vulnerable\\n",
        "exec sleep 600",
    );
    let out = run_guest(dir.path(), "4");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("status=124"),
        "two hung boots end the guest's run as timed out: {stdout}{}",
        stderr(&out)
    );
    assert_eq!(boots(dir.path()), 2, "{}", stderr(&out));
    let log = stderr(&out);
    assert!(
        log.contains("guest boot 1: no line of /init on the console within 2 s")
            && log.contains("guest boot 2: no line of /init"),
        "each hung boot is said: {log}"
    );
    assert!(
        log.contains("no init | [    0.010940] RETBleed"),
        "the kernel's last lines are on stderr: {log}"
    );
    let kept = std::fs::read_to_string(dir.path().join("guest.console.noinit1"))
        .expect("the first boot's console is kept");
    assert!(kept.contains("RETBleed"), "{kept}");
}

/// A guest whose `/init` writes its first line after the kernel's warnings
/// is booted once, and the runner returns qemu's status.
#[test]
fn a_guest_that_reaches_its_init_is_booted_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    fake_qemu(
        dir.path(),
        "[    0.010940] RETBleed: WARNING\\nE2E-BEGIN shape=test\\nE2E-END\\n",
        "exit 0",
    );
    let out = run_guest(dir.path(), "4");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("status=0"), "{stdout}{}", stderr(&out));
    assert_eq!(boots(dir.path()), 1, "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("no line of /init"),
        "{}",
        stderr(&out)
    );
}

/// The kernel command line qemu was given last, from the stand-in's record
/// of its arguments.
fn kernel_command_line(dir: &Path) -> String {
    let args = std::fs::read_to_string(dir.join("args")).expect("qemu's arguments");
    let args: Vec<&str> = args.lines().collect();
    let at = args
        .iter()
        .position(|a| *a == "-append")
        .expect("an -append");
    args[at + 1].to_string()
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
        let dir = tempfile::tempdir().expect("tempdir");
        fake_qemu(dir.path(), "E2E-BEGIN shape=test\\nE2E-END\\n", "exit 0");
        let out = run_guest_threads(dir.path(), "3", threads);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("status=0"),
            "{}",
            stderr(&out)
        );
        let line = kernel_command_line(dir.path());
        assert_eq!(
            line.split_whitespace().any(|w| w == "maxcpus=1"),
            one_cpu,
            "{threads}-threaded TCG: {line}"
        );
    }
}
