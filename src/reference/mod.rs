//! The reference consumer: a small payments example (stub: being written).
