//! CPU load of a cgroup, for pools that size themselves.
//!
//! * cgroup v2 (and `/proc/pressure/cpu`): `cpu.pressure`, the PSI lines
//!   `some avg10=… avg60=… avg300=… total=…` and `full …` ([`read_cpu_pressure`]);
//!   `cpu.stat` with `usage_usec`, `nr_periods`, `nr_throttled`,
//!   `throttled_usec` ([`read_v2_counters`]).
//! * cgroup v1: no PSI; `cpuacct.usage` (ns) in the cpuacct hierarchy and
//!   `cpu.stat` with `nr_periods`, `nr_throttled`, `throttled_time` (ns) in
//!   the cpu hierarchy ([`read_v1_counters`]). Two samples and the time
//!   between them give the busy CPUs and the throttled fraction
//!   ([`CpuCounters::since`]), which core turns into a pressure estimate.
//!
//! Directories are passed in (the cgroup root and the pool's or
//! container's path below it are the caller's business).

use std::fs;
use std::path::{Path, PathBuf};

/// Errors of pressure and usage reads; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum PressureError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("malformed {}: {reason}", path.display())]
    Malformed { path: PathBuf, reason: String },
}

/// One PSI line.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PsiLine {
    /// Percent of the last 10 s / 60 s / 300 s with stalled tasks.
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    /// Total stall time in microseconds.
    pub total_us: u64,
}

/// A `cpu.pressure` file.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Psi {
    pub some: PsiLine,
    /// `full` (kernels before 5.13 print no `full` line for CPU).
    pub full: Option<PsiLine>,
}

/// Reads `<dir>/cpu.pressure` (or any PSI file given as `dir` when it is a
/// file, e.g. `/proc/pressure/cpu`).
pub fn read_cpu_pressure(dir: &Path) -> Result<Psi, PressureError> {
    let path = if dir.is_file() {
        dir.to_path_buf()
    } else {
        dir.join("cpu.pressure")
    };
    let text = read(&path)?;
    let mut psi = Psi::default();
    let mut seen_some = false;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut words = line.split_ascii_whitespace();
        let kind = words.next().unwrap_or_default();
        let parsed = parse_psi_line(&path, words)?;
        match kind {
            "some" => {
                psi.some = parsed;
                seen_some = true;
            }
            "full" => psi.full = Some(parsed),
            other => {
                return Err(malformed(&path, format!("unknown line kind {other:?}")));
            }
        }
    }
    if !seen_some {
        return Err(malformed(&path, "no \"some\" line".to_string()));
    }
    Ok(psi)
}

fn parse_psi_line<'a>(
    path: &Path,
    words: impl Iterator<Item = &'a str>,
) -> Result<PsiLine, PressureError> {
    let mut line = PsiLine::default();
    for word in words {
        let (key, value) = word
            .split_once('=')
            .ok_or_else(|| malformed(path, format!("{word:?} is not key=value")))?;
        let float = || {
            value
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| malformed(path, format!("{key} {value:?} is not a percentage")))
        };
        match key {
            "avg10" => line.avg10 = float()?,
            "avg60" => line.avg60 = float()?,
            "avg300" => line.avg300 = float()?,
            "total" => {
                line.total_us = value
                    .parse::<u64>()
                    .map_err(|_| malformed(path, format!("total {value:?} is not a number")))?;
            }
            _ => {}
        }
    }
    Ok(line)
}

/// Cumulative CPU counters of a cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuCounters {
    /// CPU time used, nanoseconds.
    pub usage_ns: u64,
    /// CFS periods with runnable tasks (0 without a quota).
    pub nr_periods: u64,
    /// Of those, periods in which the cgroup was throttled.
    pub nr_throttled: u64,
    /// Time throttled, nanoseconds.
    pub throttled_ns: u64,
}

impl CpuCounters {
    /// From `earlier` to `self`, `elapsed_ns` apart: the average number of
    /// busy CPUs and the fraction of CFS periods throttled (0 when there
    /// were none). Counters that went backwards (cgroup recreated) count
    /// as zero.
    #[must_use]
    pub fn since(&self, earlier: &CpuCounters, elapsed_ns: u64) -> (f64, f64) {
        let used = self.usage_ns.saturating_sub(earlier.usage_ns);
        let periods = self.nr_periods.saturating_sub(earlier.nr_periods);
        let throttled = self.nr_throttled.saturating_sub(earlier.nr_throttled);
        let busy = if elapsed_ns == 0 {
            0.0
        } else {
            used as f64 / elapsed_ns as f64
        };
        let fraction = if periods == 0 {
            0.0
        } else {
            (throttled as f64 / periods as f64).min(1.0)
        };
        (busy, fraction)
    }
}

/// cgroup v1: `<cpuacct_dir>/cpuacct.usage` and `<cpu_dir>/cpu.stat`.
pub fn read_v1_counters(cpuacct_dir: &Path, cpu_dir: &Path) -> Result<CpuCounters, PressureError> {
    Ok(CpuCounters {
        usage_ns: read_v1_usage(cpuacct_dir)?,
        ..read_v1_cpu_stat(cpu_dir)?
    })
}

/// cgroup v1: the throttling counters of `<cpu_dir>/cpu.stat` (`usage_ns`
/// is 0: the usage is the cpuacct hierarchy's, [`read_v1_usage`]).
pub fn read_v1_cpu_stat(cpu_dir: &Path) -> Result<CpuCounters, PressureError> {
    let stat = read_keyed(&cpu_dir.join("cpu.stat"))?;
    Ok(CpuCounters {
        usage_ns: 0,
        nr_periods: stat.get("nr_periods"),
        nr_throttled: stat.get("nr_throttled"),
        throttled_ns: stat.get("throttled_time"),
    })
}

/// cgroup v1: `<cpuacct_dir>/cpuacct.usage`, nanoseconds.
pub fn read_v1_usage(cpuacct_dir: &Path) -> Result<u64, PressureError> {
    let path = cpuacct_dir.join("cpuacct.usage");
    let text = read(&path)?;
    text.trim()
        .parse::<u64>()
        .map_err(|_| malformed(&path, format!("{:?} is not a number", text.trim())))
}

/// cgroup v2: `<dir>/cpu.stat` (microseconds there).
pub fn read_v2_counters(dir: &Path) -> Result<CpuCounters, PressureError> {
    let stat = read_keyed(&dir.join("cpu.stat"))?;
    Ok(CpuCounters {
        usage_ns: stat.get("usage_usec").saturating_mul(1000),
        nr_periods: stat.get("nr_periods"),
        nr_throttled: stat.get("nr_throttled"),
        throttled_ns: stat.get("throttled_usec").saturating_mul(1000),
    })
}

/// A `key value` per line file.
struct Keyed(Vec<(String, u64)>);

impl Keyed {
    fn get(&self, key: &str) -> u64 {
        self.0.iter().find(|(k, _)| k == key).map_or(0, |(_, v)| *v)
    }
}

fn read_keyed(path: &Path) -> Result<Keyed, PressureError> {
    let text = read(path)?;
    let mut pairs = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut words = line.split_ascii_whitespace();
        let (Some(key), Some(value), None) = (words.next(), words.next(), words.next()) else {
            return Err(malformed(
                path,
                format!("line {line:?} is not \"key value\""),
            ));
        };
        let value = value
            .parse::<u64>()
            .map_err(|_| malformed(path, format!("{key} {value:?} is not a number")))?;
        pairs.push((key.to_string(), value));
    }
    Ok(Keyed(pairs))
}

fn read(path: &Path) -> Result<String, PressureError> {
    fs::read_to_string(path).map_err(|source| PressureError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn malformed(path: &Path, reason: String) -> PressureError {
    PressureError::Malformed {
        path: path.to_path_buf(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        fs::create_dir_all(dir).expect("mkdir");
        fs::write(dir.join(name), text).expect("write");
    }

    #[test]
    fn psi_lines_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(
            dir.path(),
            "cpu.pressure",
            "some avg10=12.50 avg60=3.00 avg300=0.10 total=123456\nfull avg10=1.00 avg60=0.00 avg300=0.00 total=99\n",
        );
        let psi = read_cpu_pressure(dir.path()).expect("psi");
        assert_eq!(psi.some.avg10, 12.5);
        assert_eq!(psi.some.total_us, 123_456);
        assert_eq!(psi.full.map(|f| f.total_us), Some(99));
        write(
            dir.path(),
            "cpu.pressure",
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        );
        assert_eq!(read_cpu_pressure(dir.path()).expect("psi").full, None);
    }

    #[test]
    fn malformed_psi_names_the_file_and_value() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (text, needle) in [
            ("some avg10=high avg60=0 avg300=0 total=0\n", "\"high\""),
            ("some avg10\n", "\"avg10\""),
            (
                "full avg10=1 avg60=0 avg300=0 total=0\n",
                "no \"some\" line",
            ),
            ("half avg10=1\n", "\"half\""),
            ("some avg10=-1 total=0\n", "\"-1\""),
        ] {
            write(dir.path(), "cpu.pressure", text);
            let err = read_cpu_pressure(dir.path()).expect_err(text);
            let message = err.to_string();
            assert!(
                message.contains(needle) && message.contains("cpu.pressure"),
                "{message}"
            );
        }
        let missing = read_cpu_pressure(&dir.path().join("nope")).expect_err("missing");
        assert!(matches!(missing, PressureError::Read { .. }));
    }

    #[test]
    fn v1_and_v2_counters_and_their_difference() {
        let dir = tempfile::tempdir().expect("tempdir");
        let acct = dir.path().join("cpuacct/pool");
        let cpu = dir.path().join("cpu/pool");
        write(&acct, "cpuacct.usage", "1000000000\n");
        write(
            &cpu,
            "cpu.stat",
            "nr_periods 10\nnr_throttled 2\nthrottled_time 5000\nnr_bursts 0\n",
        );
        let first = read_v1_counters(&acct, &cpu).expect("v1");
        assert_eq!(
            first,
            CpuCounters {
                usage_ns: 1_000_000_000,
                nr_periods: 10,
                nr_throttled: 2,
                throttled_ns: 5000
            }
        );
        write(&acct, "cpuacct.usage", "4000000000\n");
        write(
            &cpu,
            "cpu.stat",
            "nr_periods 20\nnr_throttled 7\nthrottled_time 9000\n",
        );
        let second = read_v1_counters(&acct, &cpu).expect("v1");
        let (busy, throttled) = second.since(&first, 2_000_000_000);
        assert!((busy - 1.5).abs() < 1e-9);
        assert!((throttled - 0.5).abs() < 1e-9);
        assert_eq!(first.since(&second, 0), (0.0, 0.0));
        let v2 = dir.path().join("v2/pool");
        write(&v2, "cpu.stat", "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 4\nnr_throttled 1\nthrottled_usec 7\n");
        let counters = read_v2_counters(&v2).expect("v2");
        assert_eq!(counters.usage_ns, 1_500_000);
        assert_eq!(counters.throttled_ns, 7000);
        write(&v2, "cpu.stat", "usage_usec lots\n");
        assert!(matches!(
            read_v2_counters(&v2),
            Err(PressureError::Malformed { .. })
        ));
    }

    /// This machine (cgroup v1 with a v2 hierarchy beside it): the root
    /// cgroup's counters and the system-wide PSI file read.
    #[test]
    fn this_machine() {
        let v1 = Path::new("/sys/fs/cgroup");
        if v1.join("cpuacct/cpuacct.usage").exists() && v1.join("cpu/cpu.stat").exists() {
            let counters =
                read_v1_counters(&v1.join("cpuacct"), &v1.join("cpu")).expect("v1 counters");
            assert!(counters.usage_ns > 0);
        } else {
            eprintln!("skipping v1 counters: no cgroup v1 cpu/cpuacct hierarchy");
        }
        let psi = Path::new("/proc/pressure/cpu");
        if psi.exists() {
            let read = read_cpu_pressure(psi).expect("psi");
            assert!(read.some.avg10 <= 100.0);
        } else {
            eprintln!("skipping psi: no /proc/pressure/cpu");
        }
    }
}

/// Every CPU's cumulative time from `<root>/proc/stat` (the `cpuN` lines;
/// busy = user + nice + system + irq + softirq + steal, total = busy +
/// idle + iowait; guest time is already inside user).
pub fn read_cpu_times(
    root: &Path,
) -> Result<std::collections::BTreeMap<u32, pinion_core::pools::CpuTime>, PressureError> {
    let path = root.join("proc/stat");
    let text = read(&path)?;
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let Some(cpu) = fields
            .next()
            .and_then(|name| name.strip_prefix("cpu"))
            .filter(|id| !id.is_empty())
        else {
            continue;
        };
        let cpu: u32 = cpu
            .parse()
            .map_err(|_| malformed(&path, format!("{line:?}: bad cpu id")))?;
        let values: Vec<u64> = fields
            .take(8)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|_| malformed(&path, format!("{line:?}: not a number")))?;
        let [user, nice, system, idle, iowait, irq, softirq, steal] = values[..] else {
            return Err(malformed(&path, format!("{line:?}: fewer than 8 times")));
        };
        let busy = user + nice + system + irq + softirq + steal;
        out.insert(
            cpu,
            pinion_core::pools::CpuTime {
                busy,
                total: busy + idle + iowait,
            },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod cpu_times_tests {
    use super::*;

    #[test]
    fn proc_stat_per_cpu_lines_are_read_and_a_bad_one_is_named() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(root.path().join("proc")).expect("proc");
        std::fs::write(
            root.path().join("proc/stat"),
            "cpu  10 0 5 100 1 0 0 0 0 0\ncpu0 4 1 2 50 3 1 1 1 7 0\ncpu3 6 0 3 50 0 0 0 0 0 0\nintr 1 2 3\n",
        )
        .expect("stat");
        let times = read_cpu_times(root.path()).expect("read");
        assert_eq!(times.keys().copied().collect::<Vec<_>>(), [0, 3]);
        assert_eq!((times[&0].busy, times[&0].total), (10, 63));
        assert_eq!((times[&3].busy, times[&3].total), (9, 59));
        std::fs::write(root.path().join("proc/stat"), "cpu0 1 2 x\n").expect("stat");
        let err = read_cpu_times(root.path())
            .expect_err("malformed")
            .to_string();
        assert!(
            err.contains("proc/stat") && err.contains("cpu0 1 2 x"),
            "{err}"
        );
    }
}
