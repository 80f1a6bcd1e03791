//! Raw HTTP/2 connections for the tests that crowd a gRPC socket: what a
//! client sends before its first call, and whether the server closed it.

use std::io::Read as _;
use std::os::unix::net::UnixStream;

/// The HTTP/2 connection preface and an empty SETTINGS frame: what a
/// client sends before its first call.
pub const HTTP2_PREFACE: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// Whether the server closed `conn` (EOF or an error; what it sent before,
/// its SETTINGS or a GOAWAY, is read and dropped).
pub fn closed(conn: &mut UnixStream) -> bool {
    conn.set_nonblocking(true).expect("nonblocking");
    let mut buf = [0u8; 1024];
    loop {
        match conn.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}
