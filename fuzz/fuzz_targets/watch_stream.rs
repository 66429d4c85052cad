//! Watch body framing, event decoding and the reflector's wire stream; see
//! `kube_informer_fuzz::watch_stream` for the input layout and invariants.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kube_informer_fuzz::watch_stream(data));
