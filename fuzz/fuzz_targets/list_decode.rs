//! List body decoding; see `kube_informer_fuzz::list_decode` for the invariants.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kube_informer_fuzz::list_decode(data));
