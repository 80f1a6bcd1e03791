//! Taking the socket a runtime-launched plugin inherits (`NRI_PLUGIN_SOCKET`,
//! normally fd 3). The only `unsafe` of the crate: the standard library has
//! no safe way to adopt a file descriptor by number.

use std::os::fd::{FromRawFd, OwnedFd};

use tokio::net::UnixStream;

use super::PluginError;

/// Adopts `fd` as a connected unix socket. Checks first (through
/// `/proc/self/fd`) that the descriptor is open and is a socket.
pub(super) fn take_inherited_socket(fd: i32) -> Result<UnixStream, PluginError> {
    let fail = |reason: String| PluginError::InheritedFd { fd, reason };
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map_err(|err| fail(format!("not an open descriptor ({err})")))?;
    if !link.to_string_lossy().starts_with("socket:") {
        return Err(fail(format!("not a socket but {}", link.display())));
    }
    let owned = adopt(fd);
    let stream = std::os::unix::net::UnixStream::from(owned);
    stream
        .set_nonblocking(true)
        .map_err(|err| fail(format!("cannot make it non-blocking: {err}")))?;
    UnixStream::from_std(stream)
        .map_err(|err| fail(format!("cannot register it with tokio: {err}")))
}

#[allow(unsafe_code)]
fn adopt(fd: i32) -> OwnedFd {
    // SAFETY: `fd` was checked above to be an open socket descriptor. It was
    // handed to this process by the runtime (NRI_PLUGIN_SOCKET) and nothing
    // else in Pinion owns it: only this function adopts it, and a plugin with
    // an inherited socket takes it once per connection attempt and never
    // re-dials (Plugin::run returns when it closes), so it is never owned twice.
    unsafe { OwnedFd::from_raw_fd(fd) }
}
