//! The in-repo test servers (loopback only).
