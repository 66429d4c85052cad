//! Protobuf list decoding; see `kube_informer_fuzz::protobuf_list` for the invariants.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kube_informer_fuzz::protobuf_list(data));
