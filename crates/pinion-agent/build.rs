//! `pinion-agent --version` names the commit and the build date, as
//! `pinion --version` does: the same script.
include!("../pinion/build.rs");
