//! Test-only helpers: throwaway servers and the split-brain checker.
