//! Kubernetes quantities as they arrive in pod specs and config files.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinion_core::Quantity;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(quantity) = Quantity::parse(text) {
            let _ = quantity.milli_value();
            let _ = quantity.value();
            let _ = quantity.is_integral();
        }
    }
});
