use std::collections::HashMap;

use super::*;

#[test]
fn names_and_indices_are_validated() {
    for good in ["pinion", "resource-manager", "a.b+c_d", "X9"] {
        assert_eq!(validate_name(good), Ok(()), "{good}");
    }
    for bad in ["", "with space", "slash/name", "ümlaut"] {
        assert_eq!(
            validate_name(bad),
            Err(PluginError::BadName(bad.to_string()))
        );
    }
    for good in ["00", "90", "05"] {
        assert_eq!(validate_index(good), Ok(()), "{good}");
    }
    for bad in ["", "9", "100", "ab", "-1", "９０"] {
        assert_eq!(
            validate_index(bad),
            Err(PluginError::BadIndex(bad.to_string()))
        );
    }
}

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    move |key| map.get(key).cloned()
}

#[test]
fn launch_env_selects_the_inherited_socket() {
    let options = PluginOptions::from_launch_env(env(&[
        ("NRI_PLUGIN_NAME", "pinion"),
        ("NRI_PLUGIN_IDX", "10"),
        ("NRI_PLUGIN_SOCKET", "3"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(options.endpoint, Endpoint::InheritedFd(3));
    assert_eq!(options.name, "pinion");
    assert_eq!(options.index, "10");
}

#[test]
fn launch_env_absent_means_external() {
    assert_eq!(PluginOptions::from_launch_env(env(&[])), Ok(None));
}

#[test]
fn launch_env_errors_are_clear() {
    assert_eq!(
        PluginOptions::from_launch_env(env(&[("NRI_PLUGIN_SOCKET", "three")])),
        Err(PluginError::BadSocketVar("three".to_string()))
    );
    assert_eq!(
        PluginOptions::from_launch_env(env(&[("NRI_PLUGIN_NAME", "x")])),
        Err(PluginError::IncompleteEnv("NRI_PLUGIN_NAME"))
    );
    assert_eq!(
        PluginOptions::from_launch_env(env(&[("NRI_PLUGIN_SOCKET", "3"), ("NRI_PLUGIN_IDX", "7")])),
        Err(PluginError::BadIndex("7".to_string()))
    );
}

#[tokio::test]
async fn inherited_fd_that_is_not_a_socket_is_refused() {
    let file = tempfile::tempfile().unwrap();
    use std::os::fd::AsRawFd;
    let err = fd::take_inherited_socket(file.as_raw_fd()).unwrap_err();
    assert!(matches!(err, PluginError::InheritedFd { .. }), "{err}");
    let err = fd::take_inherited_socket(999_999).unwrap_err();
    assert!(err.to_string().contains("not an open descriptor"), "{err}");
}
