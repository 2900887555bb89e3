//! Stage 3, tile/dataflow scheduling: how an op is blocked for the CPU caches and split
//! over threads. It knows nothing of guardrails.
