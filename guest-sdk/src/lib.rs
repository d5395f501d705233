//! Write swan servlets in Rust. (The SDK arrives with the servlet runtime.)
