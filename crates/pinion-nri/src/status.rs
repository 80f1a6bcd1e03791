//! ttrpc/gRPC status codes and the status a call ends with.

use std::fmt;

/// The gRPC status codes NRI uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Ok,
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
}

const CODES: [Code; 15] = [
    Code::Ok,
    Code::Cancelled,
    Code::Unknown,
    Code::InvalidArgument,
    Code::DeadlineExceeded,
    Code::NotFound,
    Code::AlreadyExists,
    Code::PermissionDenied,
    Code::ResourceExhausted,
    Code::FailedPrecondition,
    Code::Aborted,
    Code::OutOfRange,
    Code::Unimplemented,
    Code::Internal,
    Code::Unavailable,
];

impl Code {
    /// The wire number.
    #[must_use]
    pub fn number(self) -> i32 {
        CODES
            .iter()
            .position(|c| *c == self)
            .and_then(|i| i32::try_from(i).ok())
            .unwrap_or(2)
    }

    /// The code for a wire number (`Unknown` for numbers we do not list).
    #[must_use]
    pub fn from_number(number: i32) -> Self {
        usize::try_from(number)
            .ok()
            .and_then(|i| CODES.get(i).copied())
            .unwrap_or(Code::Unknown)
    }
}

/// A non-OK call result: code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    pub message: String,
}

impl Status {
    #[must_use]
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

impl std::error::Error for Status {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_with_grpc_numbers() {
        assert_eq!(Code::Unimplemented.number(), 12);
        assert_eq!(Code::ResourceExhausted.number(), 8);
        assert_eq!(Code::NotFound.number(), 5);
        for code in CODES {
            assert_eq!(Code::from_number(code.number()), code);
        }
        assert_eq!(Code::from_number(99), Code::Unknown);
        assert_eq!(Code::from_number(-1), Code::Unknown);
    }
}
