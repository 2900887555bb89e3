//! The commands, as library functions: each strings the stages together and returns typed
//! results. No argument parsing and no printing of errors happen here.
