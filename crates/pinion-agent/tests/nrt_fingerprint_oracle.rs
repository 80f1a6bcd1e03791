//! Pinion's pods fingerprint (`pinion_core::nrt::fingerprint::sign`)
//! against the podfingerprint library itself, the scheduler plugin's and
//! the exporter's: the Go program `interop/podfingerprint` signs the same
//! pod sets (built from the library's module; skipped without `go`, a
//! failure under CI). Sets: empty, one pod, the library's 3-pod compat set,
//! and pseudo-random sets of up to 300 pods over a few namespaces, with
//! duplicates and names of every length a pod name may have.

#[path = "../../pinion-api/tests/common/peers.rs"]
mod peers;

use std::io::Write as _;
use std::process::{Command, Stdio};

use pinion_core::nrt::fingerprint::sign;

/// A small deterministic generator (64-bit LCG), so a failure reproduces.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> usize {
        usize::try_from(self.next() % n).expect("small")
    }

    /// A DNS-label-like name of 1 to 63 characters.
    fn name(&mut self) -> String {
        const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789-";
        let len = 1 + self.below(63);
        (0..len)
            .map(|i| {
                let pool = if i == 0 || i == len - 1 { 36 } else { 37 };
                char::from(CHARS[self.below(pool)])
            })
            .collect()
    }
}

fn sets() -> Vec<Vec<(String, String)>> {
    let mut sets: Vec<Vec<(String, String)>> = vec![
        Vec::new(),
        vec![("default".into(), "web".into())],
        ["jaeger-dpgjk", "nginx-rt684", "envoy-g9m22"]
            .iter()
            .map(|n| ("production".to_string(), (*n).to_string()))
            .collect(),
    ];
    let mut rng = Lcg(0x5eed_0032);
    for _ in 0..200 {
        let namespaces: Vec<String> = (0..1 + rng.below(4)).map(|_| rng.name()).collect();
        let size = rng.below(301);
        let mut set: Vec<(String, String)> = Vec::with_capacity(size);
        for _ in 0..size {
            if !set.is_empty() && rng.below(20) == 0 {
                let again = set[rng.below(set.len() as u64)].clone();
                set.push(again);
                continue;
            }
            let namespace = namespaces[rng.below(namespaces.len() as u64)].clone();
            set.push((namespace, rng.name()));
        }
        sets.push(set);
    }
    sets
}

#[test]
fn pinions_fingerprint_is_the_podfingerprint_librarys() {
    let Some(oracle) = peers::go_podfingerprint() else {
        return;
    };
    let sets = sets();
    let input: String = sets
        .iter()
        .map(|set| {
            let pods: Vec<String> = set
                .iter()
                .map(|(ns, name)| format!("{ns}/{name}"))
                .collect();
            format!("{}\n", pods.join(" "))
        })
        .collect();
    let mut child = Command::new(&oracle)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("oracle starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write the sets");
    let out = child.wait_with_output().expect("oracle ends");
    assert!(
        out.status.success(),
        "oracle: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected: Vec<String> = String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(expected.len(), sets.len());
    assert_eq!(
        expected[2], "pfp0v001607b76a0e9d3aeb4",
        "the library's compat vector"
    );
    for (set, expected) in sets.iter().zip(&expected) {
        let ours = sign(set.iter().map(|(ns, name)| (ns.as_str(), name.as_str())));
        assert_eq!(&ours, expected, "set of {} pods: {set:?}", set.len());
    }
}
