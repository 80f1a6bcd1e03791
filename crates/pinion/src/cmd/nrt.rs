//! `pinion nrt`: the NodeResourceTopology object Pinion publishes for this
//! node (`docs/nrt.md`) — from the running agent (`GET /v1/nrt`, with how
//! publishing goes), or, with `--sysroot`, what an agent would publish for
//! a machine's sysfs tree with nothing placed yet (no agent needed). The
//! table shows the zones' resources, costs and attributes; `-o yaml|json`
//! the object itself, as sent to the API server.

use std::path::PathBuf;

use anyhow::Context as _;
use pinion_api::local::{NrtAnswer, NrtPublishing};
use pinion_core::nrt::{self, Method, Node, Now, Nrt};

use super::agent_config::AgentConfig;
use super::local::Local;
use crate::output::{self, Clock, Table};

/// Arguments of `pinion nrt`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    local: Local,
    /// Compute the object for the sysfs tree under DIR (`/` for this
    /// machine) with nothing placed, instead of asking the agent.
    #[arg(long, value_name = "DIR")]
    sysroot: Option<PathBuf>,
    /// With --sysroot: the agent's config file (policy, reserved CPUs,
    /// Topology Manager policy and scope); default: the agent's defaults.
    #[arg(long, value_name = "FILE", requires = "sysroot")]
    config: Option<PathBuf>,
    /// With --sysroot: the object's name (default: `node`).
    #[arg(
        long,
        value_name = "NAME",
        requires = "sysroot",
        default_value = "node"
    )]
    node_name: String,
    /// With --sysroot: the pods fingerprint's method.
    #[arg(
        long,
        value_name = "METHOD",
        requires = "sysroot",
        default_value = "with-exclusive-resources"
    )]
    pods_fingerprint_method: String,
}

/// Runs `pinion nrt`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let answer = match &args.sysroot {
        Some(sysroot) => offline(args, sysroot)?,
        None => args.local.client().nrt()?,
    };
    let clock = Clock::system();
    let text = match args.local.output.output() {
        output::Output::Table | output::Output::Wide => table(&answer, &clock)?,
        output::Output::Json => output::json(&answer.object)?,
        output::Output::Yaml => output::yaml(&answer.object)?,
    };
    print!("{text}");
    Ok(())
}

/// The object for the machine under `sysroot` with nothing placed.
fn offline(args: &Args, sysroot: &std::path::Path) -> anyhow::Result<NrtAnswer> {
    let method = Method::parse(&args.pods_fingerprint_method)?;
    let topology = pinion_host::discover(sysroot).with_context(|| {
        format!(
            "cannot discover the cpu topology under {}",
            sysroot.display()
        )
    })?;
    let config = AgentConfig::load(args.config.as_deref())?;
    let policy = config
        .policy
        .build(&topology)
        .context("cpu manager policy")?;
    let hugepages = pinion_host::meminfo::read_node_memory(sysroot)
        .map(|nodes| pinion_host::meminfo::hugepage_pools(&nodes))
        .unwrap_or_default();
    let node = Node::new(
        &policy,
        config.policy.topology_manager_policy.as_deref(),
        config.policy.topology_manager_scope.as_deref(),
        hugepages,
        method,
    );
    let content = nrt::content(
        &topology,
        &node,
        &Now {
            default: topology.all_cpus(),
            plugin_resources: &[],
            holdings: &[],
            pods: &[],
        },
    );
    Ok(NrtAnswer {
        object: nrt::object(&args.node_name, &content, None),
        publishing: NrtPublishing {
            off: Some(format!("computed offline from {}", sysroot.display())),
            ..NrtPublishing::default()
        },
    })
}

/// The table: a line on publishing, the zones' resources, their costs,
/// then the attributes (top-level first, then per zone).
pub(crate) fn table(answer: &NrtAnswer, clock: &Clock) -> anyhow::Result<String> {
    let content: Nrt =
        serde_json::from_value(answer.object.clone()).context("the agent's object")?;
    let name = answer.object["metadata"]["name"].as_str().unwrap_or("-");
    let mut out = format!(
        "NodeResourceTopology {name}: {}\n\n",
        publishing(&answer.publishing, clock)
    );
    let mut resources = Table::new(&[
        "ZONE",
        "RESOURCE",
        "CAPACITY>",
        "ALLOCATABLE>",
        "AVAILABLE>",
    ]);
    let mut costs = Table::new(&["ZONE", "COSTS"]);
    let mut attributes = Table::new(&["ZONE", "ATTRIBUTE", "VALUE"]);
    for attribute in &content.attributes {
        attributes.row(vec![
            String::new(),
            attribute.name.clone(),
            attribute.value.clone(),
        ]);
    }
    for zone in &content.zones {
        for r in &zone.resources {
            resources.row(vec![
                zone.name.clone(),
                r.name.clone(),
                r.capacity.clone(),
                r.allocatable.clone(),
                r.available.clone(),
            ]);
        }
        let list: Vec<String> = zone
            .costs
            .iter()
            .map(|c| format!("{}={}", c.name, c.value))
            .collect();
        costs.row(vec![zone.name.clone(), list.join(" ")]);
        for attribute in &zone.attributes {
            attributes.row(vec![
                zone.name.clone(),
                attribute.name.clone(),
                attribute.value.clone(),
            ]);
        }
    }
    out.push_str(&resources.render());
    out.push('\n');
    out.push_str(&costs.render());
    out.push('\n');
    out.push_str(&attributes.render());
    Ok(out)
}

fn publishing(status: &NrtPublishing, clock: &Clock) -> String {
    if let Some(off) = &status.off {
        return format!("not published ({off})");
    }
    let server = status.server.as_deref().unwrap_or("the api server");
    let last = status
        .last_update
        .map_or_else(|| "none yet".to_string(), |t| clock.time(t));
    let mut line = format!(
        "published to {server}, {} updates, last {last}",
        status.updates
    );
    if let Some(error) = &status.last_error {
        line.push_str(&format!("; failing: {error}"));
    }
    line
}
