//! CPU manager policies. `options`: the static policy's options and their
//! validation.

pub mod options;
