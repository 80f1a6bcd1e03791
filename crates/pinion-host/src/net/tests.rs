use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::symlink;

use super::*;
use crate::bounded_read::is_not_regular;
use crate::bounded_read::testing::{mkfifo, without_hanging};

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, text).expect("write");
}

fn mkdir(root: &Path, rel: &str) {
    fs::create_dir_all(root.join(rel)).expect("mkdir");
}

/// A fake sysfs laid out like the kernel's: class entries are symlinks into
/// `devices`; `eth0` is a PCI NIC on node 0, `eth1` a virtio NIC whose NUMA
/// node is on its PCI parent, `veth0` and `lo` are virtual.
fn fake_sysfs(root: &Path) {
    let pci0 = "sys/devices/pci0000:00/0000:3b:00.0";
    write(root, &format!("{pci0}/numa_node"), "0\n");
    mkdir(root, &format!("{pci0}/net/eth0"));
    write(root, &format!("{pci0}/net/eth0/speed"), "25000\n");
    symlink(
        "../../../0000:3b:00.0",
        root.join(format!("{pci0}/net/eth0/device")),
    )
    .expect("link");
    let pci1 = "sys/devices/pci0000:80/0000:af:00.0";
    write(root, &format!("{pci1}/numa_node"), "1\n");
    let virtio = format!("{pci1}/virtio3");
    mkdir(root, &format!("{virtio}/net/eth1"));
    write(root, &format!("{virtio}/net/eth1/speed"), "-1\n");
    symlink(
        "../../../virtio3",
        root.join(format!("{virtio}/net/eth1/device")),
    )
    .expect("link");
    mkdir(root, "sys/devices/virtual/net/lo");
    mkdir(root, "sys/devices/virtual/net/veth0");
    mkdir(root, "sys/class/net");
    for (name, target) in [
        (
            "eth0",
            "../../devices/pci0000:00/0000:3b:00.0/net/eth0".to_string(),
        ),
        (
            "eth1",
            "../../devices/pci0000:80/0000:af:00.0/virtio3/net/eth1".to_string(),
        ),
        ("lo", "../../devices/virtual/net/lo".to_string()),
        ("veth0", "../../devices/virtual/net/veth0".to_string()),
    ] {
        symlink(target, root.join("sys/class/net").join(name)).expect("link");
    }
}

fn v6(text: &str) -> IpAddr {
    IpAddr::V6(text.parse::<Ipv6Addr>().expect("ipv6"))
}

#[test]
fn nics_with_their_numa_node_speed_and_addresses() {
    let dir = tempfile::tempdir().expect("tempdir");
    fake_sysfs(dir.path());
    let host: AddressMap = BTreeMap::from([
        (
            "eth0".to_string(),
            vec![
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5)),
                v6("fdbd:dc05:3:154::20"),
            ],
        ),
        ("lo".to_string(), vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]),
    ]);
    let source = FixedAddresses(BTreeMap::from([(None, host)]));
    let nics = discover_nics(dir.path(), &[], &source).expect("discover");
    let names: Vec<&str> = nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["eth0", "eth1"]);
    assert_eq!(nics[0].numa, Some(0));
    assert_eq!(nics[0].speed_mbps, Some(25_000));
    assert_eq!(nics[0].addresses.len(), 2);
    assert_eq!(
        nics[1].numa,
        Some(1),
        "virtio NIC takes its PCI parent's node"
    );
    assert_eq!(nics[1].speed_mbps, None);
    assert!(nics[1].addresses.is_empty());
    assert!(nics.iter().all(|n| n.netns.is_none()));
}

#[test]
fn nics_of_configured_namespaces() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host_root = dir.path().join("host");
    let ns_root = dir.path().join("ns1");
    mkdir(&host_root, "sys/class/net");
    fake_sysfs(&ns_root);
    let with_sysfs = Netns {
        name: "ns1".into(),
        path: "/var/run/netns/ns1".into(),
        sysfs_root: Some(ns_root),
    };
    let without = Netns {
        name: "ns2".into(),
        path: "/var/run/netns/ns2".into(),
        sysfs_root: None,
    };
    let source = FixedAddresses(BTreeMap::from([
        (
            Some("ns1".to_string()),
            BTreeMap::from([("eth1".to_string(), vec![v6("fdbd:dc05:3:155::20")])]),
        ),
        (
            Some("ns2".to_string()),
            BTreeMap::from([
                ("lo".to_string(), vec![]),
                ("eth9".to_string(), vec![v6("fd00::9")]),
            ]),
        ),
    ]));
    let nics = discover_nics(&host_root, &[with_sysfs.clone(), without.clone()], &source)
        .expect("discover");
    let summary: Vec<(&str, Option<u32>, Option<&str>)> = nics
        .iter()
        .map(|n| {
            (
                n.name.as_str(),
                n.numa,
                n.netns.as_ref().map(|ns| ns.name.as_str()),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("eth0", Some(0), Some("ns1")),
            ("eth1", Some(1), Some("ns1")),
            ("eth9", None, Some("ns2")),
        ]
    );
    assert_eq!(nics[1].addresses, vec![v6("fdbd:dc05:3:155::20")]);
}

#[test]
fn numa_node_minus_one_is_unknown_and_garbage_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(root, "sys/class/net/eth0/device/numa_node", "-1\n");
    let none = FixedAddresses::default();
    let nics = discover_nics(root, &[], &none).expect("discover");
    assert_eq!(nics[0].numa, None);
    write(root, "sys/class/net/eth0/device/numa_node", "zero\n");
    let err = discover_nics(root, &[], &none).expect_err("malformed");
    assert!(
        matches!(err, NetError::Malformed { ref path, .. } if path.ends_with("device/numa_node"))
    );
    assert!(err.to_string().contains("\"zero\""), "{err}");
}

#[test]
fn regression_fifo_as_numa_node_or_speed_hung_nic_discovery() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    mkfifo(&root.join("sys/class/net/eth0/device/numa_node"));
    mkfifo(&root.join("sys/class/net/eth0/speed"));
    let err = without_hanging("nic discovery", move || {
        discover_nics(&root, &[], &FixedAddresses::default())
    })
    .expect_err("a fifo is refused");
    assert!(
        matches!(err, NetError::Read { ref path, ref source }
            if path.ends_with("device/numa_node") && is_not_regular(source)),
        "{err:?}"
    );
    fs::remove_file(dir.path().join("sys/class/net/eth0/device/numa_node")).expect("rm");
    let root = dir.path().to_path_buf();
    let nics = without_hanging("nic discovery", move || {
        discover_nics(&root, &[], &FixedAddresses::default())
    })
    .expect("a fifo speed is an unknown speed");
    assert_eq!(nics[0].speed_mbps, None);
}

#[test]
fn a_missing_class_directory_is_no_nic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nics = discover_nics(dir.path(), &[], &FixedAddresses::default()).expect("discover");
    assert!(nics.is_empty());
}

#[test]
fn an_unknown_namespace_file_is_an_error_naming_it() {
    let ns = Netns {
        name: "gone".into(),
        path: "/nonexistent/netns/gone".into(),
        sysfs_root: None,
    };
    let err = SystemAddresses
        .addresses(Some(&ns))
        .expect_err("no such namespace");
    assert!(matches!(err, NetError::EnterNamespace { ref path, .. } if path == &ns.path));
}

/// This machine: a virtio NIC (eth0) and virtual interfaces (lo, ifb*):
/// only NICs with a device are listed, and the host's addresses are found.
#[test]
fn this_machine() {
    let root = Path::new("/");
    if !root.join("sys/class/net").exists() {
        eprintln!("skipping: no /sys/class/net");
        return;
    }
    let nics = discover_nics(root, &[], &SystemAddresses).expect("discover");
    for nic in &nics {
        assert!(
            root.join("sys/class/net")
                .join(&nic.name)
                .join("device")
                .exists(),
            "{nic:?}"
        );
        assert_ne!(nic.name, "lo");
    }
    let addresses = SystemAddresses.addresses(None).expect("getifaddrs");
    assert!(addresses.contains_key("lo"), "{addresses:?}");
}
