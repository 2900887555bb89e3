//! The built-in CPU kernels: the dense comparator and the sparse kernels under test.
