//! The statistics engine: pure functions over samples, checked against scipy.
