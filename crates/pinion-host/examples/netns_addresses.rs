//! Lists the interface addresses of a network namespace (a manual check of
//! `SystemAddresses` as root):
//! `cargo run -p pinion-host --example netns_addresses -- /var/run/netns/NAME`.
use pinion_host::net::{AddressSource, Netns, SystemAddresses};

fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/var/run/netns/default".into());
    let ns = Netns {
        name: "check".into(),
        path: path.into(),
        sysfs_root: None,
    };
    match SystemAddresses.addresses(Some(&ns)) {
        Ok(map) => println!("namespace: {map:?}"),
        Err(err) => eprintln!("error: {err}"),
    }
    match SystemAddresses.addresses(None) {
        Ok(map) => println!("host: {:?}", map.keys().collect::<Vec<_>>()),
        Err(err) => eprintln!("error: {err}"),
    }
}
