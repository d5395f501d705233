//! swan
