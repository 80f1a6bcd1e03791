//! Golden outputs of the renderers of the commands that read the agent,
//! on fixed answers (`tests/golden/fixtures/*.json`, as the agent sends
//! them): each output format of each command. Harness: `golden.rs`.

use std::time::{Duration, UNIX_EPOCH};

use pinion_api::local::{Plugin, Pools, Snapshot};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::golden::check;
use crate::output::{self, Clock, Output};

fn fixture<T: DeserializeOwned>(name: &str) -> T {
    let path = crate::golden::path("../fixtures").join(name);
    let text = std::fs::read_to_string(&path).expect("fixture");
    serde_json::from_str(&text).expect("fixture parses")
}

/// Golden files `STEM.table`, `STEM.wide`, `STEM.json`, `STEM.yaml`.
fn every_output<T: Serialize>(stem: &str, value: &T, table: impl Fn(&T, bool) -> String) {
    for (output, ext) in [
        (Output::Table, "table"),
        (Output::Wide, "wide"),
        (Output::Json, "json"),
        (Output::Yaml, "yaml"),
    ] {
        let text = output::render(output, value, &table).expect("renders");
        check(&format!("{stem}.{ext}"), &text);
    }
}

/// A clock 12 s after the fixtures' last reconcile, in UTC.
fn clock() -> Clock {
    Clock {
        now: UNIX_EPOCH + Duration::from_secs(1_795_821_409),
        zone: jiff::tz::TimeZone::UTC,
    }
}

#[test]
fn ps() {
    let snapshot: Snapshot = fixture("ps.json");
    every_output("ps", &snapshot, crate::cmd::ps::table);
}

#[test]
fn pools() {
    let pools: Pools = fixture("pools.json");
    every_output("pools", &pools, crate::cmd::pools::table);
}

#[test]
fn plugins() {
    let plugins: Vec<Plugin> = fixture("plugins.json");
    let clock = clock();
    every_output("plugins", &plugins, |p, wide| {
        crate::cmd::plugins::table(p, wide, &clock)
    });
}

#[test]
fn plugins_none() {
    let text = crate::cmd::plugins::table(&[], false, &clock());
    check("plugins-none.table", &text);
}

#[test]
fn podresources() {
    let (pods, allocatable) = crate::cmd::podresources::fixture();
    for (output, ext) in [
        (Output::Table, "table"),
        (Output::Json, "json"),
        (Output::Yaml, "yaml"),
    ] {
        let list = crate::cmd::podresources::render_list(output, &pods).expect("list");
        check(&format!("podresources-list.{ext}"), &list);
        let alloc =
            crate::cmd::podresources::render_allocatable(output, &allocatable).expect("alloc");
        check(&format!("podresources-allocatable.{ext}"), &alloc);
    }
}

#[test]
fn nrt() {
    let answer: pinion_api::local::NrtAnswer = fixture("nrt.json");
    let clock = clock();
    let text = crate::cmd::nrt::table(&answer, &clock).expect("table");
    check("nrt.table", &text);
    check("nrt.yaml", &output::yaml(&answer.object).expect("yaml"));
    let offline = pinion_api::local::NrtAnswer {
        publishing: pinion_api::local::NrtPublishing {
            off: Some("no api server credentials (docs/nrt.md)".to_string()),
            ..pinion_api::local::NrtPublishing::default()
        },
        ..answer
    };
    let text = crate::cmd::nrt::table(&offline, &clock).expect("table");
    let first = text.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        "NodeResourceTopology worker-1: not published (no api server credentials (docs/nrt.md))"
    );
}
